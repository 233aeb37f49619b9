"""Properties of the redactor, over generated command lines (hypothesis): every known secret
form is removed wherever it sits (the five forms issue 20 found in clear among them, and beside
an argument long enough to be cut), redacting twice changes nothing, a line grows only by its
<redacted> and <truncated> markers and never past a bound, and ordinary ML arguments pass
unchanged."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.sources.redact import (
    ARGUMENT_LIMIT,
    COMMAND_LIMIT,
    REDACTED,
    redact_argv,
    redact_code,
    redact_name,
    redact_text,
)

# Ordinary arguments of ML tools: none of them may be touched.
ORDINARY = [
    "python", "/opt/venv/bin/python3", "-m", "torch.distributed.run", "train.py", "--lr", "3e-4",
    "--max-tokens", "512", "--tokenizer", "t5-base", "--key-size", "2048", "-p", "8080",
    "--port", "29500", "-P3306", "--batch-size=64", "--output-dir", "/data/ckpt/run-17",
    "--no-auth", "--token-file", "/run/secrets/hf", "--model", "llama-3-8b", "--seed", "7",
    "s3://bucket/train/", "https://huggingface.co/meta-llama", "--num-workers=8",
    "--config", "configs/7b.yaml", "-v", "--eval-every", "500", "key_size=3", "--tokens", "1e9",
]

# (form, whether it is recognised in free text too: a log line, a joined command line)
FORMS: list[tuple[list[str], bool]] = [
    # issue 20 item 5
    (["mysql", "-uroot", "-p{s}"], True),
    (["serve", "--private-key-data", "{s}"], True),
    (["serve", "--client-secret-value", "{s}"], True),
    (["sqlcmd", "-S", "db", "-P", "{s}"], True),
    (["vault", "login", "token", "{s}"], False),
    (["bcp", "-P{s}"], True),
    # earlier forms
    (["train.py", "--api-key", "{s}"], True),
    (["train.py", "--hf-token={s}"], True),
    (["env", "HF_TOKEN={s}"], True),
    (["train.py", "--password", "-{s}"], True),
    (["curl", "https://alice:{s}@example.com/x"], True),
    (["psql", "postgresql://u:{s}@db:5432/x"], True),
    (["curl", "-H", "Authorization: Bearer {s}"], True),
    (["x", '{{"password": "{s}"}}'], True),
    (["x", "--conf=db.password={s}"], True),
    (["x", "ghp_{s}"], True),
    (["x", "hf_{s}"], True),
    (["x", "sk-{s}"], True),
    (["x", "https://acct.blob.core.windows.net/c?sv=1&sig={s}&se=2"], True),
    (["az", "AccountName=a;AccountKey={s};EndpointSuffix=core.windows.net"], True),
    (["serve", "-----BEGIN PRIVATE KEY-----\n{s}\n-----END PRIVATE KEY-----"], True),
    (["echo", "-----BEGIN", "RSA", "PRIVATE", "KEY-----", "{s}", "-----END", "RSA", "PRIVATE",
      "KEY-----"], False),
    (["curl", "-H", "X-Api-Key: {s}"], False),
    # quoted values
    (["w.py", "--db-password='{s}'"], True),
    (["env", 'HF_TOKEN="{s}"'], True),
    (["python", "-c", "login(password='{s}')"], True),
    (["curl", "-u", "user:{s}"], False),
    # the redaction probe's forms (F1: no space after the header's name; F2: a program's code;
    # F3: a numbered name, a fragment's token, a list of arguments, a YAML line)
    (["curl", "-H", "Authorization:Bearer {s}"], True),
    (["curl", "-H", "Authorization:Token", "{s}"], True),
    (["python", "-c", "import os; os.environ['HF_TOKEN']='{s}'; import train"], False),
    (["x", "--password2={s}"], True),
    (["x", "https://h/cb#access_token={s}&token_type=bearer"], True),
    (["x", '--config-json=["--password","{s}"]'], True),
    (["x", "--cfg=db:\n  password: {s}"], True),
]

# Upper case and digits, starting with a letter: never a port, never in ORDINARY, and long
# enough for every token shape (ghp_ needs 20).
secrets = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", min_size=19, max_size=40) \
    .map(lambda s: "Q" + s)
ordinary_argv = st.lists(st.sampled_from(ORDINARY), max_size=12)


def leaked(secret: str, text: str, width: int = 6) -> list[str]:
    """Pieces of `secret` (`width` characters or more) found in `text`."""
    return [secret[i:i + width] for i in range(len(secret) - width + 1)
            if secret[i:i + width] in text]


def place(form: list[str], secret: str, before: list[str], after: list[str]) -> list[str]:
    return before + [word.format(s=secret) for word in form] + after


@given(form=st.sampled_from(FORMS), secret=secrets, before=ordinary_argv, after=ordinary_argv)
def test_every_known_secret_form_is_removed(form, secret, before, after):
    argv = place(form[0], secret, before, after)
    line = redact_argv(argv)
    assert not leaked(secret, line), line
    if form[1]:
        text = redact_text(" ".join(argv))
        assert not leaked(secret, text), text


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(form=st.sampled_from([f for f in FORMS if f[1]]), secret=secrets,
       padding=st.integers(min_value=ARGUMENT_LIMIT - 80, max_value=ARGUMENT_LIMIT + 40),
       spaced=st.booleans())
def test_a_secret_where_a_long_argument_is_cut_is_never_half_kept(form, secret, padding, spaced):
    # A form recognised in free text, inside one argument that crosses the limit near it.
    filler = ("ab " * padding)[:padding] if spaced else "a" * padding
    argv = ["x", filler + " " + " ".join(word.format(s=secret) for word in form[0])]
    line = redact_argv(argv)
    assert not leaked(secret, line), line
    assert "<truncated: " in line or len(argv[1]) <= ARGUMENT_LIMIT


@given(st.lists(st.text(max_size=60) | st.sampled_from(ORDINARY), max_size=20))
def test_redacting_twice_changes_nothing(argv):
    line = redact_argv(argv)
    assert redact_text(line) == line
    once = redact_text(" ".join(argv))
    assert redact_text(once) == once


@given(st.lists(st.text(max_size=300) | st.sampled_from(ORDINARY)
                | st.text(alphabet="ab =-", min_size=ARGUMENT_LIMIT, max_size=3 * ARGUMENT_LIMIT),
                max_size=12))
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
          max_examples=60)
def test_a_line_grows_only_by_its_markers_and_never_past_the_limit(argv):
    line = redact_argv(argv)
    markers = line.count(REDACTED) * len(REDACTED) + line.count("<truncated: ") * 48
    assert len(line) <= len(" ".join(argv)) + markers
    assert len(line) - markers <= COMMAND_LIMIT + ARGUMENT_LIMIT + len(argv)


def test_a_128_kib_argument_is_cut_with_a_marker_that_says_how_long_it_was():
    line = redact_argv(["python", "train.py", "--config-json", "x" * (128 << 10)])
    assert line == "python train.py --config-json <truncated: 131072 characters>"
    words = " ".join(["w"] * 4000)
    kept = redact_argv(["python", words])
    assert kept.startswith("python w w w") and kept.endswith("<truncated: 7999 characters>")
    assert len(kept) <= ARGUMENT_LIMIT + 40


def test_arguments_past_the_command_limit_are_counted_not_kept():
    argv = ["python"] + ["y" * 1000] * 100
    line = redact_argv(argv)
    assert line.endswith("more arguments>") and len(line) < COMMAND_LIMIT + 1100


@given(ordinary_argv)
def test_ordinary_arguments_pass_unchanged(argv):
    assert redact_argv(argv) == " ".join(argv)
    assert redact_text(" ".join(argv)) == " ".join(argv)


def test_ports_after_p_stay_and_passwords_after_it_go():
    assert redact_argv(["mysql", "-h", "db", "-P", "3306", "-p", "8080"]) == \
        "mysql -h db -P 3306 -p 8080"
    assert redact_argv(["ssh", "-p", "2222", "scp", "-P", "65535"]) == "ssh -p 2222 scp -P 65535"
    assert redact_argv(["sqlcmd", "-P", "70000"]) == f"sqlcmd -P {REDACTED}"  # not a port
    assert redact_argv(["mysql", "-p3306"]) == f"mysql -p{REDACTED}"  # glued: mysql's password


@given(st.lists(st.text(max_size=60) | st.sampled_from(ORDINARY), max_size=8))
def test_a_name_redacted_comes_back_unchanged(words):
    """redact_name (a meter's, a pod's name: it keys things apart) tags a name that had
    something hidden; what it returns it returns unchanged (no second tag on a store's way out
    of what the daemon wrote)."""
    once = redact_name(" ".join(words))
    assert redact_name(once) == once


@given(form=st.sampled_from([f for f in FORMS if f[1]]), secret=secrets, before=ordinary_argv,
       after=ordinary_argv)
def test_a_name_redacted_holds_no_secret_and_comes_back_unchanged(form, secret, before, after):
    once = redact_name(" ".join(place(form[0], secret, before, after)))
    assert not leaked(secret, once), once
    assert redact_name(once) == once


def _test_inputs() -> list[str | list[str]]:
    """Every input of the redaction tests (these modules' parametrize cases, FORMS and ORDINARY):
    each string, and each list of strings (an argv)."""
    found: list[str | list[str]] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.List | ast.Tuple):
            if node.elts and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                 for e in node.elts):
                found.append([e.value for e in node.elts])  # type: ignore[attr-defined]
            for e in node.elts:
                walk(e)
        elif isinstance(node, ast.BinOp):  # "A" * 62 + "...", "x" + PEM: as Python has it
            try:
                value = eval(compile(ast.Expression(node), "<case>", "eval"), {"PEM": PEM})  # noqa: S307
            except (NameError, TypeError):
                return
            if isinstance(value, str):
                found.append(value)

    for name in ("test_redact.py", "test_redact_programs.py", "test_redact_properties.py"):
        tree = ast.parse((Path(__file__).parent / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "parametrize":
                walk(node.args[1])
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id in ("FORMS", "ORDINARY", "PEM"):
                walk(node.value)
    return found


PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEApemBodyLineOne\npemBodyLineTwo==\n"
       "-----END RSA PRIVATE KEY-----")


def test_redacting_twice_changes_nothing_on_every_test_input():
    """Redaction is idempotent on every input the redaction tests use (a store's way out
    redacts what the daemon wrote again): `login(password='x')` gave
    `login(password=<redacted>)`, whose `)` a second pass took for the value, and
    `Client(token="abc", url=...)` lost its `,` the second time."""
    inputs = _test_inputs()
    assert len(inputs) > 300, len(inputs)
    changed = []
    for case in inputs:
        texts = [redact_argv(case), redact_text(" ".join(case))] if isinstance(case, list) \
            else [redact_text(case), redact_code(case), redact_argv([case])]
        changed += [(case, once) for once in texts if redact_text(once) != once]
    assert not changed, changed
