"""Secrets out of command lines (and any text that may carry one), before anything is stored,
served, logged or posted.

A process's command line is redacted once, at the source (`redact_argv`, called by the process
source), so the store, the API documents, evidence, reports and snapshots only ever see the
redacted line. The few paths that read a command line or other outside text themselves go
through the same functions: an action's dry run and confirmation (`redact_argv` on the live
argv), webhook bodies (`redact_document`), the daemon's log (`RedactingFilter`), a stack frame's
source line, which a classification reason may quote (`redact_code`, where it is read:
daemon.analysis.source_lines), and the names the daemon reads from outside (`redact_field`): a
stack frame's function and file name and a thread's name (daemon.sources.frames.parse_dump), the
host name and instance facts (at start: daemon.runtime.daemon), a storage walk's error
(daemon.analysis.meters), a GPU's name and uuid and NVML's error text (daemon.sources.nvml), a
process's owner and the kubelet's pod, namespace and container names (daemon.sources.owners,
daemon.sources.podresources), each price's source, note and URL in the daemon's catalog
(daemon.runtime.price_host). What is read back from a store goes through them once more on its
way out (a store from another writer, from before a rule, or edited holds what the daemon would
have hidden): a command line or other stored text through `redact_stored`, a stored JSON
document through `redact_stored_json`, a stack's frames, the GPUs' names and errors, each
owner and the host's facts through `redact_field` and `redact_document` (daemon.store.queries,
daemon.store.reader), in the report, the snapshot page, replay and snapshots. A meter reading's
name keys its readings: `redact_name` tags one that had something hidden, so two that differ
only in a secret stay two (at the source, daemon.analysis.meters.reading_name, and on the way
out).

What is hidden:
- PEM blocks, from `-----BEGIN` to the `-----END ...-----` line, or to the end of the argument;
- the value of a secret-looking name: `--api-key VALUE` (even when VALUE starts with `-`, or
  after `--`), `--db-password=VALUE`, `HF_TOKEN=VALUE` (after any character that is no name's:
  a path's `/srv/password=VALUE`, a file a process named, `x|password=VALUE`), quoted
  (`--password='a b'`, `HF_TOKEN="VALUE"`, `login(password='VALUE')`), `--api-key= VALUE` (in a
  text too), `PASSWORD: VALUE`, `"secret": "VALUE"`, `X-Api-Key: VALUE`, a list's
  `["--password", "VALUE"]`, a YAML, TOML or INI line's `password: VALUE`, `password =
  "VALUE"`, with the sign percent-encoded (`--token%3DVALUE`), and a VALUE that starts with a
  space no shell splits at (`--password=\u00a0VALUE`);
- in an argv, in a program's code (the argument after an option of CODE_OPTIONS: `python -c`,
  `node -e`, `perl -e`, whatever the program) and in any argument with a space, tab or new line
  in it (a shell's `-c` text, a config), what `redact_code` hides too:
  `os.environ['HF_TOKEN']='VALUE'`, `openai.api_key = 'VALUE'`, `token: str = 'VALUE'`;
- a program's own password options (PROGRAM_OPTIONS), separate, glued or after `=`:
  `curl -u user:PASSWORD` (`--user`, `-uuser:PASSWORD`, `-fsSLu`; `-U`, `-E file:PASSWORD`,
  `--oauth2-bearer`, `-b name=VALUE`), `sshpass -p PASSWORD`, `redis-cli -a PASSWORD`
  (`-aPASSWORD`), after the program (by its basename) wherever it starts a word: argv[0], after
  `env`, `sudo`, `timeout`, `xargs`, inside a `bash -c` text or a stored command line. The same
  options of other programs stay (`python -u`, `ssh -p 2222`, `docker run -u 1000:1000`);
- credentials in URLs (`https://user:pw@host`), query and fragment parameters with a
  secret-looking name (Azure SAS `sig=`, `X-Amz-Signature=`, `X-Goog-Signature=`, `key=`,
  `auth=`, `pass=`, OAuth's `#access_token=`; percent-encoded too), connection-string keys
  (Azure `AccountKey=`, `SharedAccessKey=`, `Password=`, ODBC `Pwd=`);
- bearer and basic authorization values (in an argv also where the scheme is an argument of its
  own: `Authorization: Bearer TOKEN` unquoted, `--auth Bearer TOKEN`); after an authorization
  header's name with or without a space (`Authorization:Bearer TOKEN`, `authorization: token
  TOKEN`, GitHub's scheme), the scheme stays and the credential goes, in an argv also where it is
  the next argument (`Authorization:Bearer` `TOKEN`);
- tokens recognised by their shape alone: JWTs, GitHub (`ghp_`, `gho_`, ..., `github_pat_`),
  GitLab (`glpat-` and kin), Slack (`xoxb-`, `xapp-`, webhook URLs), Hugging Face (`hf_`,
  `api_org_`), OpenAI-style `sk-` (and Anthropic `sk-ant-`), Stripe, npm, PyPI, AWS access key
  ids, GCP API keys (`AIza...`), OAuth access tokens (`ya29.`), OAuth client secrets
  (`GOCSPX-`) and Azure storage account keys (88 characters of base64).

A name is secret-looking when its last word (split on `-`, `_`, `.`) is one of SECRET_WORDS
(`--hf-token`, `AWS_SECRET_ACCESS_KEY`, `--auth`), numbered (NUMBERED_WORDS: `--password2`) or
a plural of PLURAL_WORDS (`--passwords`, `--secrets`) or of PLURAL_AFTER after its word
(`--api-keys`, `--access-tokens`), or it ends in one of SECRET_SUFFIXES (`PGPASSWORD`,
`--apikey`, `SECRET_KEY_BASE`), or its last word only says how the secret is spelled (one of
CARRIER_WORDS: `--private-key-data`, `--client-secret-value`, `--password-file-content`) after a
secret-looking name. A name is read as it shows: fullwidth letters folded, soft hyphens and
zero-width characters dropped (`--pass\u00adword`). So `--max-tokens 512`, `--tokenizer t5`,
`--key-size 2048`, `--tokens 1e9` (a run's token count) and `--keys a,b` stay readable: in an ML
tool those are ordinary arguments.

Short options (argv only, where a word is an argument): `-pSECRET` (mysql's password, always
glued to its `-p`) is hidden; `-p 8080` is not (with a space mysql prompts for the password, and
everywhere else `-p` is a port). `-P VALUE` and `-PVALUE` (sqlcmd, bcp, isql: the password) are
hidden unless VALUE is a port number, which is what `mysql -P 3306` and `scp -P 2222` mean. A
bare `token`, `password`, `secret`... word hides the word after it (`vault login token X`).

Bounded work: an argument longer than ARGUMENT_LIMIT is kept up to the last space before the
limit (a word cut in two is dropped whole, so no head of a secret stays) and ends in a visible
`<truncated: N characters>`; once a command line has COMMAND_LIMIT characters, the arguments
after it become `<truncated: N more arguments>`. Every pattern runs in time linear in its input:
each one starts at a literal or at the start of a word (so a run of letters is scanned from one
place, not from each of its letters: the unanchored URL-scheme pattern took 3.7 s on 20 KB), and
what it repeats is bounded or ends where the run ends; nested `a=b=c` values are walked in a loop,
not by recursion. bench/redact.py prints the times; _ASSIGNMENT_HERE is only ever `match`ed at a
position, never searched.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from daemon.sources.safe_text import REDACTED as REDACTED  # (re-exported: the hidden marker)
from daemon.sources.safe_text import lines, one_line, without_url_credentials

# An argument up to 4 KiB is kept whole (a long --config-json is still readable); Linux lets one
# be 128 KiB and a command line 2 MiB, which nobody reads on a screen.
ARGUMENT_LIMIT = 4096
COMMAND_LIMIT = 16384

# The last word of a secret-looking name, and endings of names written as one word.
SECRET_WORDS = frozenset({
    "password", "passwd", "pwd", "pass", "passphrase", "secret", "token", "key", "apikey",
    "auth", "authorization", "credential", "credentials", "creds", "cookie", "sig",
    "signature", "pat", "accountkey", "sharedaccesskey", "sharedaccesssignature",
})
SECRET_SUFFIXES = ("password", "passwd", "passphrase", "secret", "token", "apikey", "accesskey",
                   "privatekey", "secretkey", "accountkey", "credentials",
                   "secretkeybase")  # (Rails' SECRET_KEY_BASE)
# A secret word numbered (`--password2`, `TOKEN_1` is two words): the word without its digits.
NUMBERED_WORDS = frozenset({"password", "passwd", "passphrase", "secret", "token", "apikey"})
# Plurals that are secrets whatever comes before them (`--passwords`, `DB_SECRETS`), and those
# that are only after a word that makes them credentials (`--api-keys`, `--access-tokens`):
# `--tokens 1e9` counts a run's tokens, `--keys a,b` names fields, `--max-tokens`, `--num-keys`
# and `--special-tokens` are ordinary ML arguments.
PLURAL_WORDS = frozenset({"passwords", "passwds", "passphrases", "secrets", "apikeys"})
PLURAL_AFTER = {"tokens": frozenset({"api", "access", "auth", "bearer", "refresh", "session",
                                     "oauth", "secret"}),
                "keys": frozenset({"api", "access", "secret", "private", "auth"})}
# The last word of a name that says how a secret is given, not what it is: `--private-key-data`,
# `--client-secret-value`, `TOKEN_B64`. Not "file" or "path": a path is not the secret.
CARRIER_WORDS = frozenset({
    "data", "value", "val", "string", "str", "text", "b64", "base64", "hex", "raw", "content",
    "contents", "inline", "literal", "json", "pem",
})
# Bare argv words that announce a secret as the next argument (`vault login token X`).
SECRET_ANNOUNCERS = frozenset({"token", "password", "passwd", "passphrase", "secret", "apikey"})
# An authorization's scheme: the credential is the word after it, also as an argument of its own
# (`curl -H Authorization: Bearer TOKEN` unquoted, `--auth Bearer TOKEN`); the scheme is kept.
AUTH_SCHEMES = frozenset({"bearer", "basic", "digest"})
# After an authorization header's name a scheme may also be one of these (`Authorization: token
# X` is GitHub's form, `Negotiate`/`NTLM` carry base64); elsewhere a bare `token` is no scheme.
AUTHORIZATION_SCHEMES = AUTH_SCHEMES | {"token", "negotiate", "ntlm"}
# Negated boolean flags (`--no-auth`) take no value.
_NEGATION = re.compile(r"(?i)^(?:no|disable|skip|without)[-_]")


_NAME_WORDS = re.compile(r"[-_.]")


def is_secret_name(name: str) -> bool:
    """Whether a flag, variable or key name looks like it holds a secret."""
    # Names repeat (every `lr=` of a long config line): the short ones are remembered.
    return _short_name_is_secret(name) if len(name) <= 64 else _name_is_secret(name)


def _name_is_secret(name: str) -> bool:
    if not name.isascii():  # `--ｐａｓｓｗｏｒｄ`, `--pass\u00adword`: as it reads
        name = _plain(name)
    bare = name.strip().lstrip("-").lower()
    if not bare or _NEGATION.match(bare):
        return False
    words = [w for w in _NAME_WORDS.split(bare) if w]
    if len(words) > 1 and words[-1] in CARRIER_WORDS:
        words = words[:-1]
        if len(words) > 1 and words[-1] in ("file", "path"):  # `--password-file-content`
            words = words[:-1]
    if not words:
        return False
    last = words[-1]
    if last in SECRET_WORDS or last in PLURAL_WORDS \
            or len(words) > 1 and words[-2] in PLURAL_AFTER.get(last, ()):
        return True
    if last[-1].isdigit() and last.rstrip("0123456789") in NUMBERED_WORDS:
        return True
    return "".join(words).rstrip("0123456789").endswith(SECRET_SUFFIXES)


def _plain(name: str) -> str:
    """A name as it reads: compatibility forms folded (fullwidth letters), format characters
    (soft hyphen, zero-width space and joiners) dropped."""
    return "".join(c for c in unicodedata.normalize("NFKC", name)
                   if unicodedata.category(c) != "Cf")


_short_name_is_secret = functools.lru_cache(maxsize=4096)(_name_is_secret)


# PEM: the header may be split from the body when a key is passed unquoted.
_PEM = re.compile(r"-----BEGIN[A-Z0-9 ]{0,64}-----.*?(?:-----END[A-Z0-9 ]{0,64}-----|\Z)", re.S)
_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,64}(?:-----)?")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,64}(?:-----)?")
# The characters of a name: letters and digits of any script (`--ｐａｓｓｗｏｒｄ` reads as
# `--password`: is_secret_name folds it), `_ . -`, and the format characters a name may hide in
# (soft hyphen, zero-width space and joiners, word joiner, BOM: `--pass\u00adword`).
_NAME_CHARS = r"\w.\-\u00ad\u200b-\u200d\u2060\ufeff"
# Query parameters, a URL's fragment (OAuth's implicit flow: `#access_token=`) and
# connection-string parts (after ? & # or ;, or their percent-encoded forms), whose name is
# secret-looking (is_secret_name: `sig`, `X-Amz-Signature`, `key`, `auth`, `pass`, `AccountKey`,
# `Pwd`, `auth_token`); the value (_PARAMETER_VALUE) is matched only after a secret name.
_PARAMETER = re.compile(
    r"(?i)(?:[?&;#]|%3f|%26|%23)(?P<name>[\w.\-]{1,64})(?:=|%3d)(?=[^&;\s#\"'])")
_PARAMETER_VALUE = re.compile(r"[^&;\s#\"']+")
# NAME=value / NAME:value at the start of a name (the name is checked by is_secret_name; after
# any character that is no name's, so after `|`, `+`, `@`, `>` too, but `; & ? #`, after which
# _PARAMETER hides the value to the next `;` or `&`: `;AccountKey=x;EndpointSuffix=...` keeps
# its suffix); the value is matched separately (_VALUE) only when the name is secret, so that a
# long `a=b=c=...` is walked once (`_assignments`). The sign may be percent-encoded (`--token%3DVALUE`). The value starts at any
# character but an ASCII space (a shell splits words there only: `--password=\u00a0VALUE`).
_ASSIGNMENT = re.compile(rf"(?<![{_NAME_CHARS}=:%;&?#])(?P<key>[{_NAME_CHARS}]+)"
                         r"(?P<sep>[=:]|%3[dD])(?=[^ \t\n\r\f\v])")
_ASSIGNMENT_HERE = re.compile(rf"(?P<key>[{_NAME_CHARS}]+)(?P<sep>[=:]|%3[dD])"
                              r"(?=[^ \t\n\r\f\v])")
# A value: a word, or a quoted string to its closing quote (`--password='a b'`, `HF_TOKEN="x"`,
# `login(password='x')`), or to the end of the text when the quote is not closed.
_VALUE = re.compile(r"\"[^\"]*\"?|'[^']*'?|[^ \t\n\r\f\v\"']+")
# A line of YAML, TOML or INI in a text (`db:\n  password: VALUE`, `password = "VALUE"`, `-
# token: VALUE`): a name at the start of a line, `:` and a space or `=` with a space; the value
# as _VALUE (hidden only when the name is secret-looking), not a bracket (`key = (pid, start)` is
# code: redact_code's forms read it).
_LINE_ASSIGNMENT = re.compile(r"(?m)^[ \t]*(?:-[ \t]+)?(?P<key>[\w.\-]{1,64})(?P<before>[ \t]*)"
                              r"(?P<sep>[:=])(?P<gap>[ \t]*)(?=[^ \t\n\r\f\v(\[{])")
_ANNOTATED = re.compile(r"[ \t]*=[^=]")
# A list of arguments in a text (`--config-json=["--password","VALUE"]`, a Python repr): a
# secret-looking flag, quoted, then the next item.
_LISTED_FLAG = re.compile(r"(?P<head>[\"'](?P<flag>-{1,2}[\w.\-]{1,64})[\"']\s*,\s*[\"'])"
                          r"(?P<value>(?:[^\"'\\]|\\.)*)")
# "name": "value" and 'name': 'value' (JSON, Python reprs in logs).
_QUOTED_PAIR = re.compile(r"(?P<key>[\"'](?P<name>[^\"'\s]{1,64})[\"']\s*:\s*[\"'])"
                          r"(?P<value>(?:[^\"'\\]|\\.)*)")
_AUTHORIZATION = re.compile(r"(?i)\b(?P<scheme>bearer|basic|digest)(?P<space>\s+)[^\s\"',]+")
# An authorization header's name and sign, with or without a space (`Authorization:Bearer X`,
# `authorization: token X`, `"Authorization": "Bearer X"`, `HTTP_AUTHORIZATION=Basic X`): its
# scheme (AUTHORIZATION_SCHEMES) stays and the credential after it goes, or the whole value
# where it has no scheme. Starts at the literal name; what it repeats ends where a run ends.
_AUTHORIZATION_NAMED = re.compile(
    r"(?i)authorization[\"']?[^\S\r\n]*[:=][^\S\r\n]*[\"']?"
    r"(?:(?P<scheme>bearer|basic|digest|token|negotiate|ntlm)\b(?P<space>[^\S\r\n]*))?"
    r"(?P<value>[^\s\"',]+)?")
# An argument that ends in an authorization's name and scheme (`Authorization:Bearer`,
# `-HAuthorization: token`): the credential is the next argument.
_AUTHORIZATION_SCHEME_LAST = re.compile(
    r"(?i)authorization[\"']?[^\S\r\n]*[:=][^\S\r\n]*[\"']?"
    r"(?:bearer|basic|digest|token|negotiate|ntlm)[\"']?$")
# A header argument: `X-Api-Key: value`, `Authorization: token value`, `Cookie: a=b`.
_HEADER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9-]*)(?P<sep>:\s+)(?P<value>.+)$", re.S)
_TOKENS = re.compile(
    r"(?:\b(?:gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|gl(?:pat|dt|rt|ptt|cbt|soat|ft|imt|oas|agent)-[A-Za-z0-9_-]{20,}"
    r"|xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
    r"|hf_[A-Za-z0-9]{20,}|api_org_[A-Za-z0-9]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|npm_[A-Za-z0-9]{36}|pypi-AgE[A-Za-z0-9_-]{40,}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"
    r"|AIza[0-9A-Za-z_-]{30,}|ya29\.[0-9A-Za-z_-]{20,}|GOCSPX-[A-Za-z0-9_-]{20,}"
    r"|eyJ[A-Za-z0-9_-]{5,}(?:\.[A-Za-z0-9_-]*){2,4})"
    r"|(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{86}==)"
)
_SLACK_WEBHOOK = re.compile(r"(?i)(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+")


def redact_argv(argv: list[str] | tuple[str, ...]) -> str:
    """Join a process's argv into one line with every secret replaced by <redacted>, at most
    about COMMAND_LIMIT characters long (the module docstring says how it is cut): the words
    of `redacted_words`, joined by spaces."""
    return " ".join(redacted_words(argv))


def redacted_words(argv: list[str] | tuple[str, ...]) -> list[str]:
    """A process's argv with every secret replaced by <redacted>, a word per argument (a PEM
    block's words are one), cut after about COMMAND_LIMIT characters with a last word
    "<truncated: N more arguments>".

    Beyond `redact_text` on each argument: the argument after a secret-looking flag or a bare
    `token` is hidden whatever it looks like (`--password -x9`), a PEM block passed unquoted (its
    header and body in separate arguments) is hidden up to its END line, and header arguments
    (`X-Api-Key: value`) are recognised.
    """
    words: list[str] = []
    hide_next = False
    previous = ""
    in_pem = False
    left = COMMAND_LIMIT
    # curl -u user:PASSWORD, sshpass -p PASSWORD, redis-cli -a PASSWORD: a program's own
    # options (PROGRAM_OPTIONS), after the program wherever it comes (env, sudo, timeout, ...)
    programs = _ProgramOptions(in_text=False)
    for index, whole in enumerate(argv):
        if left <= 0:
            words.append(f"<truncated: {len(argv) - index} more arguments>")
            break
        word, cut = _cut(whole)
        left -= len(word) + 1
        if in_pem:
            end = _PEM_END.search(word)
            if end is None:
                if not words or words[-1] != REDACTED:
                    words.append(REDACTED)
                continue
            in_pem = False
            rest = redact_text(word[end.end():]) + cut
            if rest or not words or words[-1] != REDACTED:
                words.append(REDACTED + rest)
            continue
        own = programs.word(word) if programs.program is not None or word in PROGRAM_OPTIONS \
            or "/" in word and word.rpartition("/")[2] in PROGRAM_OPTIONS else None  # (fast)
        if hide_next:
            scheme = previous.lower() in AUTHORIZATION_SCHEMES
            if word == "--" and not scheme or _is_scheme(word, previous) and not scheme \
                    and index + 1 < len(argv):
                # `--password -- VALUE`: the end of options, then the value; `Authorization:
                # Bearer TOKEN`: the scheme, then the credential
                previous = word
                words.append(word)
                continue
            hide_next = False
            # mysql -P 3306, scp -P 2222: after -P a port is a port.
            words.append(word if previous == "-P" and _is_port(word) else REDACTED + cut)
            continue
        if own is not None:  # `-ubob:<redacted>`, `<redacted>` after `sshpass -p`
            previous = word
            words.append(redact_text(own) + cut)
            continue
        if previous == "-u" and ":" in word and not word.partition(":")[2].isdigit():
            # `-u user:PASSWORD` of a program not in PROGRAM_OPTIONS (curl's form, which other
            # clients copy): hidden on the safe side; a uid:gid (`docker run -u 1000:1000`) is not
            previous = word
            words.append(redact_text(word.partition(":")[0]) + ":" + REDACTED + cut)
            continue
        begin = _PEM_BEGIN.search(word)
        if begin is not None and _PEM_END.search(word, begin.end()) is None \
                and not word[begin.end():].strip(" -\n\r\t"):
            # "-----BEGIN", "RSA", "PRIVATE", "KEY-----", "MIIE...", ...: the body follows.
            in_pem = True
            words.append(word[:begin.start()] + REDACTED + cut)
            continue
        lower = word.lower()
        hide_next = (_is_secret_flag(word) or word == "-P" or lower in SECRET_ANNOUNCERS
                     or lower in AUTH_SCHEMES
                     # `--api-key= VALUE`, `PASSWORD: VALUE`: the name and its sign, alone
                     or len(word) > 1 and word[-1] in "=:" and is_secret_name(word[:-1])
                     # `Authorization:Bearer TOKEN`: the name and scheme, then the credential
                     or "authorization" in lower
                     and _AUTHORIZATION_SCHEME_LAST.search(word) is not None)
        shown = word
        if "=" in word and (previous in CODE_OPTIONS or " " in word or "\n" in word
                            or "\t" in word):
            # a program's code or a text (`python -c "os.environ['HF_TOKEN'] = 'x'"`, a shell's
            # `-c`, a config): the code forms too (every one of them has a `=`)
            shown = _code_forms(word)
        previous = word
        words.append(_redact_header(shown) + cut)
    return words


# Options whose value is a program's code, whatever the program: `python -c`, `node -e` and
# `--eval`, `node -p`, `perl -e` and `-E`, `ruby -e`, `php -r`, `Rscript -e`, `julia -e`.
# Any program's: an interpreter goes by many names (python3.11, pypy3, a venv's or conda's
# path, behind sudo, env, docker exec or kubectl exec), and the code forms hide only a
# secret-looking name's value given with `=`, so the value of another program's `-c` or `-e`
# (a config path, a port, a pattern) passes as it was.
CODE_OPTIONS = frozenset({"-c", "--command", "-e", "-E", "--eval", "-p", "--print", "-r"})


# What of a program's option's value is secret: all of it (`sshpass -p PASSWORD`), what follows
# its first `:`, `%` or `,` (`curl -u user:PASSWORD`, `smbclient -U user%PASSWORD`, `lftp -u
# user,PASSWORD`; without one the program asks for the password), all of it when it holds a `=`
# (`curl -b name=VALUE`; without one it names a file), or all of it unless it is an option or a
# MongoDB URI (`mongosh -p` with no value asks for the password: `mongosh -u alice -p
# --quiet`, `mongosh -u alice -p mongodb://db/x`).
_WHOLE, _WITH_EQUALS, _UNLESS_PROMPTED = "whole", "with equals", "whole unless prompted"
_AFTER_COLON, _AFTER_PERCENT, _AFTER_COMMA = "after :", "after %", "after ,"


class _Program(NamedTuple):
    """A program whose own options carry a password, which the same option of another program
    does not (`-p` is a port, `-u` a user, `-a` anything)."""

    options: Mapping[str, str]  # option: what of its value is secret
    # Short options without a value that may come first in the same word (`curl -fsSLu u:pw`).
    flags: str = ""
    # A program whose options all come before its first other argument (sshpass: the command it
    # runs follows, with options of its own: `ssh -p 2222`): its options that take a value.
    valued: frozenset[str] | None = None


_REDIS = _Program({"-a": _WHOLE, "--pass": _WHOLE})
# The MongoDB shells take the password after `-p` (mongosh asks for it when `-p` has no value:
# the next word an option or the URI); their port is `--port`.
_MONGO = _Program({"-p": _UNLESS_PROMPTED})
# OpenLDAP's clients; the flags are those of any of them that take no value (`-a`, `-r`, `-z`
# take one in some: a word they start is then read as flags, and `-w` in it hides more).
_LDAP = _Program({"-w": _WHOLE}, flags="AILMNQVWZacnrtuvxz")
_LFTP = _Program({"-u": _AFTER_COMMA, "--user": _AFTER_COMMA}, flags="d")
_SAMBA = _Program({"-U": _AFTER_PERCENT, "--user": _AFTER_PERCENT}, flags="BEINPegkq")
# The program by its basename (`/usr/bin/curl`). Its options are looked for wherever it starts
# a word: argv[0], after a wrapper (`env`, `sudo -u x`, `timeout 60`, `xargs`), inside a shell's
# `-c` text or a stored command line. Their value comes next, glued (`-ubob:pw`, `-ahunter2`) or
# after `=` (`--user=bob:pw`).
PROGRAM_OPTIONS: Mapping[str, _Program] = {
    "curl": _Program({"-u": _AFTER_COLON, "--user": _AFTER_COLON, "-U": _AFTER_COLON,
                      "--proxy-user": _AFTER_COLON, "-E": _AFTER_COLON, "--cert": _AFTER_COLON,
                      "--proxy-cert": _AFTER_COLON, "--oauth2-bearer": _WHOLE,
                      "-b": _WITH_EQUALS, "--cookie": _WITH_EQUALS},
                     flags="0123456aBfgGIijJklLMnNOpqRsSvVZ#"),
    "sshpass": _Program({"-p": _WHOLE}, valued=frozenset({"-f", "-d", "-p", "-P"})),
    "redis-cli": _REDIS,
    "keydb-cli": _REDIS,  # redis-cli's fork
    # `-p PASSWORD` (the port is `--port`); `--password` is a secret-looking name for every
    # program (hidden even when its value starts with `-`)
    "mongosh": _MONGO,
    "mongo": _MONGO,  # the shell before mongosh
    # OpenLDAP: `-w PASSWORD` (`-W` asks, `-y FILE` names a file), after flags (`-xw PASSWORD`)
    **dict.fromkeys(("ldapsearch", "ldapmodify", "ldapadd", "ldapdelete", "ldapwhoami",
                     "ldapcompare", "ldapmodrdn", "ldapexop"), _LDAP),
    # and the old (`-a`) and new (`-s`) password of the entry it changes
    "ldappasswd": _Program({"-w": _WHOLE, "-a": _WHOLE, "-s": _WHOLE}, flags="AINQSVWZnvx"),
    "lftp": _LFTP,
    # lftp's own `open` command, in the commands it is given (`lftp -c 'open -u user,PASSWORD
    # host'`, `lftp -e ...`, its scripts); elsewhere `open -u` takes no value (openvt), so a
    # comma in the next word is rare and hiding what follows it costs nothing
    "open": _LFTP,
    # Samba's clients: `-U [DOMAIN\\]user%PASSWORD`, `--user=user%PASSWORD`
    **dict.fromkeys(("smbclient", "rpcclient", "smbcacls", "smbcquotas", "smbtree", "net"),
                    _SAMBA),
}
_QUOTES = "'\""
_SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "|&"})


class _ProgramOptions:
    """Walks a command's words (an argv, or a text split at its spaces), and hides the values
    of the options PROGRAM_OPTIONS names, in the words after their program. In a text, a quote
    around a value is kept (`'curl -u bob:pw'` gives `'curl -u bob:<redacted>'`), a value in
    quotes with spaces is hidden to its closing quote, and a program's options end with its
    command (`|`, `;`, `&&`, a new line)."""

    __slots__ = ("in_text", "program", "pending", "skip", "open_quote", "before")

    def __init__(self, in_text: bool) -> None:
        self.in_text = in_text
        self.program: _Program | None = None
        self.pending: str | None = None  # what of the next word is secret
        self.skip = False  # the next word is the value of an option that is no secret
        self.open_quote = ""  # the quote a hidden value opened, hidden to where it closes
        # In a text: the text before the word (a callable, asked only when a hidden value ends
        # in closing punctuation: `$(curl -u bob:pw)` keeps its `)`).
        self.before: Callable[[], str] = str

    def word(self, word: str) -> str | None:
        """The word with its secret hidden, or None: not an option's value (nor an option
        with its value glued): redact it as any other word."""
        if self.open_quote:
            quote = self.open_quote
            if quote not in word:
                return ""
            rest = word[word.index(quote) + 1:]
            self.open_quote = ""
            closing = _closing(self.before, rest) if rest and rest[-1] in _CLOSING else 0
            # what follows the closing quote in the same word is the secret's too (`'a b'c`),
            # but for the quotes it sits in and closing punctuation (`$(curl -u 'bob:a b')`)
            return quote if rest[:len(rest) - closing].strip(_QUOTES) else rest
        if self.pending is not None:
            kind, self.pending = self.pending, None
            if kind != _UNLESS_PROMPTED or not _prompts(word.lstrip(_QUOTES)):
                return self._hidden(word, kind)
            # `mongosh -p --quiet`: -p had no value (mongosh asks); the word is read as any other
        if self.skip:
            self.skip = False
            return None
        program, core = self.program, word.lstrip(_QUOTES) if self.in_text else word
        if program is not None and len(core) > 1 and core[0] == "-" and core != "--":
            secret, at = _secret_option(program, core)
            if secret is not None:
                if at >= len(core):
                    self.pending = secret
                    return None
                head = word[:len(word) - len(core) + at]
                return head + self._hidden(core[at:], secret, head)
            self.skip = program.valued is not None and core in program.valued
            return None
        if program is not None and program.valued is not None:
            self.program = None  # the command sshpass runs: its options are its own
        name = core
        if self.in_text:  # `$(curl`, `x=$(curl`, `x;curl`, `a&&curl`, `{ curl`
            for mark in ";|&(`{":
                name = name.rpartition(mark)[2]
        found = PROGRAM_OPTIONS.get(name[name.rfind("/") + 1:])
        if found is not None:
            self.program = found
        return None

    def end_of_command(self) -> None:
        self.program, self.pending, self.skip = None, None, False

    def _hidden(self, value: str, kind: str, head: str = "") -> str:
        """`value` (a word, or what follows its option, `head`, in it) with what `kind` says
        is secret hidden."""
        lead = trail = ""
        if self.in_text and value and value[0] in _QUOTES:
            lead, value = value[0], value[1:]
            close = value.find(lead)
            if close < 0:  # `--user 'bob:two words'`: hidden to the closing quote
                self.open_quote = trail = lead
            else:  # what follows the closing quote is the quote or quotes it sits in, and
                # the closing punctuation after them (`$(curl -u 'bob:pw')`)
                after = value[close:]
                closing = _closing(lambda: self.before() + head + lead, after) if after[-1] \
                    in _CLOSING else 0
                value, trail = value[:close], after if not after[:len(after) - closing].strip(
                    _QUOTES) else lead
        elif self.in_text and value:
            if value[-1] in _QUOTES:
                value, trail = value[:-1], value[-1]  # the quote around the whole command
            if value and value[-1] in _CLOSING:  # `$(curl -u bob:pw)`, `f(-p pw)`
                closing = _closing(lambda: self.before() + head, value)
                value, trail = value[:len(value) - closing], value[len(value) - closing:] + trail
        if kind.startswith("after "):
            at = value.find(kind[-1])
            if at < 0:
                return lead + value + trail
            return lead + value[:at + 1] + REDACTED + trail
        if kind == _WITH_EQUALS and "=" not in value or not value and (self.in_text or lead):
            return lead + value + trail
        # (an empty argument too: `-a ''` joined into a line reads `-a  next`, whose next word a
        # second pass would take for the value)
        return lead + REDACTED + trail


def _prompts(word: str) -> bool:
    """Whether the word after `mongosh -p` is no password (mongosh asks for it): an option,
    or the connection string."""
    return word.startswith(("-", "mongodb://", "mongodb+srv://"))


def _secret_option(program: _Program, word: str) -> tuple[str | None, int]:
    """(what of its value is secret, where in `word` the value starts: len(word) when it is
    the next word) for one of the program's secret options; (None, 0) for any other word."""
    if word.startswith("--"):
        name, equals, _ = word.partition("=")
        return program.options.get(name), len(name) + 1 if equals else len(word)
    at = 1
    while at < len(word) and word[at] in program.flags:
        at += 1
    if at >= len(word):
        return None, 0
    return program.options.get("-" + word[at]), at + 1


def _program_values(text: str) -> str:
    """The values of PROGRAM_OPTIONS's options in one string (an argument that is a shell's
    `-c` text, a stored command line, a log message), after their program at any word's
    start."""
    if " " not in text and "\t" not in text and "\n" not in text:
        return text  # one word (a shell splits words at these): no program and its option
    for name in PROGRAM_OPTIONS:
        if name in text:
            break
    else:
        return text
    parts = re.split(r"(\s+)", text)  # words at even indices, the spaces between at odd
    programs = _ProgramOptions(in_text=True)
    at = 0  # where parts[i] starts in `text`
    programs.before = lambda: text[max(0, at - _CLOSING_WINDOW):at]
    for i in range(0, len(parts), 2):
        if i and "\n" in parts[i - 1] and not programs.open_quote:
            programs.end_of_command()
        word = parts[i]
        hidden = programs.word(word)
        if hidden is not None:
            parts[i] = hidden
        if word and (word in _SEPARATORS or word[-1] in ";|&") and not programs.open_quote:
            programs.end_of_command()
        at += len(word) + (len(parts[i + 1]) if i + 1 < len(parts) else 0)
    return "".join(parts)


# Closing punctuation after a hidden value, in a text: `$(curl -u bob:pw)`, `login(password=x)`,
# `f(token=abc, url=...)`. Kept where it closes what opened before the value (and is not part of
# the secret): within the last _CLOSING_WINDOW characters before it.
_CLOSING = ")]},;"
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_CLOSING_WINDOW = 256


def _closing(before: Callable[[], str], value: str) -> int:
    """How many of `value`'s last characters are closing punctuation that is not part of the
    secret (the value hidden in a text, `before()` the text before it): a `)`, `]` or `}` that
    closes an opener before the value (the value itself balanced without it), a `,` or `;`
    inside an opener (`f(token=abc, x)`), and any of them after a value already hidden (a
    second pass: `login(password=<redacted>)` stays as it is)."""
    rest = value.rstrip(_CLOSING)
    if rest.endswith(REDACTED):
        return len(value) - len(rest)
    window = before()[-_CLOSING_WINDOW:]
    unclosed: dict[str, int] = {}
    end = len(value)
    while end > len(rest):
        mark = value[end - 1]
        opener = _CLOSERS.get(mark)
        if opener is None:  # `,` `;`: inside a call, a list, a `$(...)`
            if not any(window.count(o) > window.count(c) for c, o in _CLOSERS.items()):
                break
        else:
            inside = value[:end - 1]
            if mark not in unclosed:
                unclosed[mark] = window.count(opener) - window.count(mark)
            if unclosed[mark] <= 0 or inside.count(opener) != inside.count(mark):
                break
            unclosed[mark] -= 1
        end -= 1
    return len(value) - end


def _cut(word: str) -> tuple[str, str]:
    """(what is kept of an argument, the truncation marker or ""). A long argument is kept up
    to the last space before ARGUMENT_LIMIT: the word the limit falls in is dropped whole, so
    the head of a secret cut in two never stays."""
    if len(word) <= ARGUMENT_LIMIT:
        return word, ""
    kept = word[:ARGUMENT_LIMIT]
    if not word[ARGUMENT_LIMIT].isspace():
        kept = kept[:max(kept.rfind(c) for c in " \t\n\r\x0b\x0c") + 1]
    return kept, f"<truncated: {len(word)} characters>"


def _is_port(value: str) -> bool:
    return len(value) <= 5 and value.isascii() and value.isdigit() and 0 < int(value) <= 65535


def _glued_password(word: str, before: Callable[[], str] = str) -> str:
    """`-pSECRET` (mysql: the password glued to -p) and `-PSECRET` (sqlcmd, bcp) hidden;
    `-P3306` is a port. In a text, the closing punctuation after it (`$(mysql -pSECRET)`) stays
    (`before`: the text before the word)."""
    if len(word) > 2 and word[0] == "-" and word[1] in "pP" and word[2] != "-":
        if word[1] == "P" and _is_port(word[2:]):
            return word
        return word[:2] + _hide(word[2:], lambda: before() + word[:2])
    return word


def _hide(value: str, before: Callable[[], str]) -> str:
    """<redacted> for a secret value found in a text, with the closing punctuation after it
    that is not part of it (`_closing`; `before()`: the text before the value)."""
    if not value or value[-1] not in _CLOSING:
        return REDACTED
    closing = _closing(before, value)
    return REDACTED + value[len(value) - closing:] if closing else REDACTED


def _is_secret_flag(word: str) -> bool:
    """`--api-key` or `-token` alone: its value is the next argument."""
    return word.startswith("-") and "=" not in word and ":" not in word \
        and _FLAG.fullmatch(word) is not None and is_secret_name(word)


_FLAG = re.compile(rf"-{{1,2}}[{_NAME_CHARS}]+")


def _is_kept_scheme(name: str, text: str, start: int, end: int) -> bool:
    """Whether text[start:end], a secret name's value, is an authorization's scheme, which
    stays (redact_text hides the credential after it): any scheme after an authorization's name
    (`Authorization:Bearer`, `HTTP_AUTHORIZATION=token`), or `Bearer`, `Basic`, `Digest` with a
    credential after it (`--auth=Bearer TOKEN`); `--password=basic` alone is a password."""
    value = text[start:end].lower()
    if value in AUTHORIZATION_SCHEMES and name.lower().endswith("authorization"):
        return True
    return value in AUTH_SCHEMES and _AUTHORIZATION.match(text, start) is not None


def _is_scheme(word: str, previous: str) -> bool:
    """Whether an argument after a secret's name is an authorization's scheme, kept (the
    credential is the argument after it): `Bearer` after `--auth`, `token` after
    `Authorization:`."""
    lower = word.lower()
    return lower in AUTH_SCHEMES or lower in AUTHORIZATION_SCHEMES \
        and previous.lower().rstrip(":= ").endswith("authorization")


_HEADER_SCHEME = re.compile(r"(?i)(?P<scheme>bearer|basic|digest|token|negotiate|ntlm)"
                            r"(?:(?P<space>\s+)(?=\S)|$)")


def _redact_header(word: str) -> str:
    """`X-Api-Key: value`, `Authorization: Bearer value`, `Cookie: a=b` hide the value (an
    authorization's scheme stays, `token` too after `Authorization`; a scheme alone, its
    credential the next argument, stays as it is); any other argument goes through
    redact_text."""
    header = _HEADER.match(word)
    if header is not None:
        name = header.group("name")
        if is_secret_name(name) or name.lower() in ("cookie", "set-cookie", "private-token"):
            scheme = _HEADER_SCHEME.match(header.group("value"))
            if scheme is not None and (scheme.group("scheme").lower() in AUTH_SCHEMES
                                       or name.lower().endswith("authorization")):
                if not scheme.group("space"):
                    return word  # `Authorization: Bearer`, then the credential
                return name + header.group("sep") + scheme.group("scheme") + " " + REDACTED
            return name + header.group("sep") + REDACTED
    return redact_text(word)


# Source code (a frame's line quoted in evidence): a secret-looking name given a value with
# spaces around the sign, a type annotation before it, or as a subscript's key: `DB_PASSWORD =
# "x"`, `self.api_key: str = 'x'`, `if token == "x"`, `os.environ["HF_TOKEN"] = "x"`,
# `connect(password = "x")`. Starts at the start of a word (or a quoted key), so each name is
# scanned from one place; its value is a string literal (with its prefix: f"", rb'') to its
# closing quote or the line's end, or a bare word.
_CODE_ASSIGNMENT = re.compile(
    r"(?:(?<!\w)(?P<name>[^\W\d]\w*)|\[(?P<quote>[\"'])(?P<key>[^\"'\s]{1,64})"
    r"(?P=quote)\])(?P<sign>\s*(?::\s*[A-Za-z_][A-Za-z0-9_.]{0,64}(?:\[[^\]=\n]{0,64}\])?\s*)?"
    r"(?:[-+*/|&]?=|==|!=|:=)(?!=)\s*)"
    r"(?P<value>[rRbBfFuU]{0,2}(?:\"[^\"]*\"?|'[^']*'?)|[^\s,;()\[\]{}]+)?")


def redact_code(line: str) -> str:
    """One line of a program's source with its secrets hidden: what `redact_text` hides, and a
    secret-looking name's value given in code (`DB_PASSWORD = "x"`, `api_key: str = "x"`,
    `token == "x"`, `env["HF_TOKEN"] = "x"`): `_CODE_ASSIGNMENT`. A line longer than
    ARGUMENT_LIMIT is cut first, as an argument is (the word the limit falls in dropped whole)."""
    line, cut = _cut(line)
    return redact_text(_code_forms(line)) + cut


def _code_forms(text: str) -> str:
    """Every secret-looking name's value given in code (_CODE_ASSIGNMENT) hidden. After a name
    that is no secret its value is looked at again (`--toml=password = "x"`: `toml`'s value
    is `password`, which is given a value of its own), so each name is a match's start once."""
    out: list[str] = []
    done = at = 0  # text[:done] is in `out`; where to look for the next name
    while (match := _CODE_ASSIGNMENT.search(text, at)) is not None:
        name = match.group("name") or match.group("key")
        start = match.start("value")
        if match.group("value") is None:
            at = match.end()
        elif not is_secret_name(name) or _is_kept_scheme(name, text, start, match.end()) \
                or text.startswith("(", match.end()):
            # (a call's result is no secret written down: `key = jax.random.PRNGKey(0)`; what
            # its arguments hold is looked at from here)
            at = start
        else:
            out.append(text[done:start] + REDACTED)
            done = at = match.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def redact_text(text: str) -> str:
    """Redact secrets inside one string: an argument, a whole command line or a log message."""
    if not text:
        return text
    text = _PEM.sub(REDACTED, text)
    text = without_url_credentials(text)
    text = _SLACK_WEBHOOK.sub(lambda m: m.group(1) + REDACTED, text)
    text = _parameters(text)
    if "authorization" in text.lower():
        text = _AUTHORIZATION_NAMED.sub(_authorization_named, text)
    text = _QUOTED_PAIR.sub(_quoted_pair, text)
    if "-" in text:
        text = _LISTED_FLAG.sub(_listed_flag, text)
    text = _line_assignments(text)
    text = _assignments(text)
    text = _flag_values(text)
    text = _program_values(text)
    text = _AUTHORIZATION.sub(_authorization, text)
    return _TOKENS.sub(REDACTED, text)


def _parameters(text: str) -> str:
    """Every query parameter (or fragment's, or connection string's part) whose name is
    secret-looking, with its value hidden (_PARAMETER)."""
    if "=" not in text and "%" not in text:
        return text
    out: list[str] = []
    done = 0  # text[:done] is in `out`
    for match in _PARAMETER.finditer(text):
        if match.start() < done or not is_secret_name(match.group("name")):
            continue
        value = _PARAMETER_VALUE.match(text, match.end())
        if value is None:
            continue
        out.append(text[done:match.end()])
        out.append(_hide(value.group(), functools.partial(_before, text, match.end())))
        done = value.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _listed_flag(match: re.Match[str]) -> str:
    if match.group("value") and is_secret_name(match.group("flag")):
        return match.group("head") + REDACTED
    return match.group(0)


def _line_assignments(text: str) -> str:
    """A secret-looking name's value on a line of YAML, TOML or INI (_LINE_ASSIGNMENT)."""
    if " " not in text and "\t" not in text:
        return text  # (`:` and a space or `=` with a space)
    out: list[str] = []
    done = 0  # text[:done] is in `out`
    for match in _LINE_ASSIGNMENT.finditer(text):
        if match.start() < done or not (match.group("gap") or match.group("before")) \
                or not is_secret_name(match.group("key")):
            continue  # (`password:x`, `password=x`: _assignments; `https://`: no name)
        value = _VALUE.match(text, match.end())
        if value is None or _is_kept_scheme(match.group("key"), text, match.end(), value.end()) \
                or match.group("sep") == ":" and _ANNOTATED.match(text, value.end()):
            continue  # (`api_key: str = "x"` is code: redact_code's forms hide its value)
        out.append(text[done:match.end()])
        out.append(_hidden_value(text, match.end(), value.end()))
        done = value.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _authorization(match: re.Match[str]) -> str:
    value = match.group(0)[match.end("space") - match.start():]
    return match.group("scheme") + match.group("space") + _hide(value, lambda: _window(match))


def _authorization_named(match: re.Match[str]) -> str:
    value = match.group("value")
    if not value:
        return match.group(0)
    return match.group(0)[:match.start("value") - match.start()] + _hide(
        value, lambda: _before(match.string, match.start("value")))


def _before(text: str, at: int) -> str:
    """What `_closing` looks at before text[at]."""
    return text[max(0, at - _CLOSING_WINDOW):at]


def _window(match: re.Match[str]) -> str:
    """What `_closing` looks at before a match's value."""
    start = match.start()
    return match.string[max(0, start - _CLOSING_WINDOW):start]


# The longest command line the daemon writes (redacted_words: COMMAND_LIMIT, then a last
# argument of up to ARGUMENT_LIMIT and its markers): a stored one read back is cut here.
STORED_LIMIT = COMMAND_LIMIT + ARGUMENT_LIMIT + 128


def redact_stored(text: str) -> str:
    """A command line (or other text) read back from a store, on its way out: `redact_text`
    again, as a snapshot does (a store written before a rule existed, by another writer, or
    edited holds secrets this daemon would have hidden), on at most STORED_LIMIT characters
    (cut as an argument is, the word the limit falls in dropped whole, then
    `<truncated: N characters>`): bounded work on a hostile file's 20 MB line."""
    if len(text) <= STORED_LIMIT:
        return redact_text(text)
    kept = text[:STORED_LIMIT]
    if not text[STORED_LIMIT].isspace():
        kept = kept[:max(kept.rfind(c) for c in " \t\n\r\x0b\x0c") + 1]
    return redact_text(kept) + f"<truncated: {len(text)} characters>"


# A short text from outside that repeats (a stack frame's function and file name, a thread's
# name, a bucket bound of a latency reading) is remembered redacted: at most 4096 texts of up to
# 256 characters (2 MiB with their redacted copies), whatever a hostile process names its frames.
_REMEMBERED_FIELD = 256
_remembered_text = functools.lru_cache(maxsize=4096)(redact_text)


def redact_field(text: str) -> str:
    """A short text from outside, on its way into the daemon or out of a store: a stack
    frame's function or file name (the process chose them: a function may be named like an
    AWS key), a thread's name, a host name, a meter's name. `redact_stored` (so bounded work
    on a hostile 20 MB name), remembered when short: the same frames come in every dump."""
    return _remembered_text(text) if len(text) <= _REMEMBERED_FIELD else redact_stored(text)


# A name that tells things apart (a meter reading's, which the store keys readings by) and had
# something hidden keeps a tag of what it was: two meters whose names differ only in a URL's
# token (`...?token=A`, `...?token=B`) redact to one text, and their readings added up (the
# snapshot's copy failed on its key). The tag is 4 hex digits of a SHA-256 of the raw name: the
# same on every way out (the daemon's source, a store of any age, a snapshot), 1 in 65 536 to
# repeat between two names, and 16 bits of a hash say next to nothing of what was hidden (a
# guess at it is confirmed only as one of 65 536 that match).
_NAME_TAG_DIGITS = 4


def redact_name(text: str) -> str:
    """A name from outside that keys things apart (a meter's reading name, a storage path, a
    pod's, namespace's, container's or unit's name: a workload's ledger job and /metrics series),
    `redact_field`; where that hid something, ` [tag]` after it (`_NAME_TAG_DIGITS` hex of a
    SHA-256 of the raw name; before it where a tag after would read as a secret flag's value),
    so that two names that differ only in what was hidden stay two. A name this returns comes
    back unchanged (nothing is left to hide, so no second tag)."""
    shown = redact_field(text)
    if shown == text:
        return text
    # Settled first: `login(password='x')` hides to `login(password=<redacted>)`, whose `)` a
    # second pass takes for the value; what this returns must be a text redaction leaves alone.
    for _ in range(3):
        again = redact_field(shown)
        if again == shown:
            break
        shown = again
    tag = f"[{_name_tag(text)}]"
    tagged = f"{shown} {tag}"
    # (a name that ends in a secret-looking flag, `<redacted> --api-key`, would have its tag
    # taken for the flag's value: the tag goes first there)
    return tagged if redact_field(tagged) == tagged else f"{tag} {shown}"


def _name_tag(text: str) -> str:
    raw = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(b"mlcost name\0" + raw).hexdigest()[:_NAME_TAG_DIGITS]


def _assignments(text: str) -> str:
    """Every `NAME=value` whose name is secret-looking, with its value hidden. A value may itself
    be an assignment (`--conf=db.password=x`): it is looked at from where the value starts, in
    this loop (a recursion per `=` was one stack frame per character pair of `a=a=a=...`)."""
    out: list[str] = []
    done = 0  # text[:done] is in `out`
    at = 0  # where to look for the next assignment
    match = _ASSIGNMENT.search(text)
    while match is not None:
        key, value_at = match.group("key"), match.end()
        if text.startswith("//", value_at):  # a URL (https://...), not an assignment
            at = value_at
        elif is_secret_name(key):
            value = _VALUE.match(text, value_at)
            end = value.end() if value is not None else value_at
            out.append(text[done:value_at])
            hidden = text[value_at:end]
            if _is_kept_scheme(key, text, value_at, end):
                # `Authorization:Bearer <redacted>`, `--auth=Bearer <redacted>`: the scheme
                # stays, the credential after it is hidden (_AUTHORIZATION_NAMED,
                # _AUTHORIZATION; at the text's end it is the next argument)
                out.append(hidden)
            else:
                out.append(_hidden_value(text, value_at, end))
            done = at = end
        else:
            at = value_at
            here = _ASSIGNMENT_HERE.match(text, at)
            if here is not None:
                match = here
                continue
        match = _ASSIGNMENT.search(text, at)
    out.append(text[done:])
    return "".join(out)


def _hidden_value(text: str, start: int, end: int) -> str:
    """What shows of a secret value text[start:end] (_VALUE's): quotes around it stay
    (`login(password='x')`), and closing punctuation after it (`login(password=x)`, `f(token=x,
    y)`)."""
    hidden = text[start:end]
    if hidden and hidden[0] in _QUOTES:
        closed = len(hidden) > 1 and hidden[-1] == hidden[0]
        return hidden[0] + REDACTED + (hidden[0] if closed else "")
    return _hide(hidden, functools.partial(_before, text, start))


def _flag_values(text: str) -> str:
    """`--api-key VALUE`, `-P VALUE` and `-pVALUE` inside one string (an argument, a log
    message, a joined command line)."""
    if "-" not in text:
        return text
    parts = re.split(r"(\s+)", text)  # words at even indices, the spaces between at odd
    at = 0  # where parts[i] starts in `text` (what `_closing` looks at before a value)
    before = lambda: text[max(0, at - _CLOSING_WINDOW):at]  # noqa: E731 (reads `at` then)
    for i in range(0, len(parts), 2):
        word = parts[i]
        flag = parts[i - 2] if i >= 2 else ""
        if flag == "--" and i >= 4 and _is_secret_flag(parts[i - 4]):
            flag = parts[i - 4]  # `--password -- VALUE`: the end of options, then the value
        if word and word != "--" and not (word.lower() in AUTH_SCHEMES and parts[i + 2:i + 3]
                                          != [""] and i + 2 < len(parts)) and (
                _is_secret_flag(flag) or flag == "-P" and not _is_port(word)
                # `--token= VALUE`: the flag and its sign, then the value
                or len(flag) > 2 and flag[-1] == "=" and _is_secret_flag(flag[:-1])):
            parts[i] = _hide(word, before)
        else:
            parts[i] = _glued_password(word, before)
        at += len(word) + (len(parts[i + 1]) if i + 1 < len(parts) else 0)
    return "".join(parts)


def _is_secret_field(name: str) -> bool:
    """A JSON field holding a secret; a bare "key" is not one (mlcostd's documents name a
    process's pid:start its key), though a token-shaped value under it still is hidden."""
    return name.lower() != "key" and is_secret_name(name)


def _quoted_pair(match: re.Match[str]) -> str:
    if _is_secret_field(match.group("name")) and match.group("value"):
        return match.group("key") + REDACTED
    return match.group(0)


def redact_document(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings) with `redact_text` applied to every string
    (a short one remembered: a latency reading's bucket bounds repeat in every row).

    For bodies that leave the host (webhooks): keys are kept, values under a secret-looking
    key are hidden whole.
    """
    if isinstance(value, str):
        return _remembered_text(value) if len(value) <= _REMEMBERED_FIELD else redact_text(value)
    if value is None or isinstance(value, int | float):  # (before Mapping's slower check)
        return value
    if isinstance(value, Mapping):
        return {key: REDACTED if isinstance(key, str) and _is_secret_field(key)
                and isinstance(item, str) and item else redact_document(item)
                for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_document(item) for item in value]
    return value


# A stored document's text up to this long is remembered redacted (replay reads the same bodies
# at every tick it shows; a recommendation's body is 3-4 KB); a longer one, from a hostile
# file, is redacted each time, not kept: the cache holds at most 256 x 16 KiB of text and its
# redacted copy (8 MiB), in a long-lived mlcost-top replay too.
_REMEMBERED_CHARS = 16384


def redact_stored_json(text: str) -> str:
    """A JSON text read back from a store (an event's detail, a recommendation's body or text,
    a process's kind), on its way out: parsed, `redact_document`, written again with its keys in
    their order; text that is no JSON goes through `redact_text` whole. The one output redaction
    of a stored document: `snapshot --db` writes it into the copy, and the report, the page and
    replay read through it (daemon.store.queries). Redacting twice changes nothing, so a store
    this daemon wrote (redacted at the source) reads as it was written."""
    if len(text) <= _REMEMBERED_CHARS:
        return _remembered_json(text)
    return _redacted_json(text)


def _redacted_json(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return redact_text(text)
    return json.dumps(redact_document(value))


_remembered_json = functools.lru_cache(maxsize=256)(_redacted_json)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts every record's formatted message (and its traceback
    text), so no secret reaches the daemon's log whatever a message interpolates; and shows
    the control bytes left in them (daemon.sources.safe_text), so no escape sequence reaches
    the terminal or journal that shows the log, and no newline inside a message forges a line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = one_line(redact_text(message))
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = lines(redact_text(record.exc_text))
        if record.stack_info:
            record.stack_info = lines(redact_text(record.stack_info))
        return True
