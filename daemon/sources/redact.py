"""Secrets out of command lines, at the source, before anything is stored or shown."""

from __future__ import annotations

import re

REDACTED = "<redacted>"

# Keys whose values are secrets (case-insensitive, matched inside longer names too:
# --db-password, HF_TOKEN=..., --openai-api-key).
_SECRET_KEY = (
    r"(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|credentials?|auth|stripetoken|[a-z0-9_-]*key)"
)
# --key=value, key=value, key:value
_KEY_EQ_VALUE = re.compile(
    r"(?i)(?P<key>(?:^|(?<=[\s]))-{0,2}[a-z0-9_.-]*" + _SECRET_KEY + r"[a-z0-9_.-]*)(?P<sep>[=:])(?P<value>\S+)"
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<userinfo>[^/\s@]+)@", re.I)
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")
_BEARER = re.compile(r"(?i)\b(bearer\s+)\S+")
# Token-shaped values seen alone: GitHub, Hugging Face, OpenAI, Slack, JWTs.
_KNOWN_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
)
_SECRET_FLAG = re.compile(r"(?i)^-{1,2}[a-z0-9_.-]*" + _SECRET_KEY + r"[a-z0-9_.-]*$")


def redact_argv(argv: list[str] | tuple[str, ...]) -> str:
    """Join a process's argv into one line with secret values replaced by <redacted>.

    Handles `--key value` (the value is the next argument), `--key=value`, `KEY=value`,
    credentials in URLs, AWS access key ids, bearer tokens and well-known token formats.
    """
    words: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next and not word.startswith("-"):
            words.append(REDACTED)
            hide_next = False
            continue
        hide_next = bool(_SECRET_FLAG.match(word)) and "=" not in word
        words.append(redact_text(word))
    return " ".join(words)


def redact_text(text: str) -> str:
    """Redact secrets inside one string (a single argument or a whole command line)."""
    text = _URL_CREDENTIALS.sub(lambda m: m.group("scheme") + REDACTED + "@", text)
    text = _KEY_EQ_VALUE.sub(lambda m: m.group("key") + m.group("sep") + REDACTED, text)
    text = _AWS_KEY_ID.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    text = _KNOWN_TOKENS.sub(REDACTED, text)
    return text
