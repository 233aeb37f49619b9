"""Command lines are redacted at the source: no secret reaches the store."""

import pytest

from daemon.sources.redact import REDACTED, redact_argv


@pytest.mark.parametrize("argv, secret", [
    (["train.py", "--api-key", "abc123"], "abc123"),
    (["train.py", "--db-password=hunter2"], "hunter2"),
    (["env", "HF_TOKEN=hf_abcdefghijklmnopqrstuv"], "hf_abcdefghijklmnopqrstuv"),
    (["aws", "--access-key", "AKIAABCDEFGHIJKLMNOP"], "AKIAABCDEFGHIJKLMNOP"),
    (["sync", "AKIAABCDEFGHIJKLMNOP"], "AKIAABCDEFGHIJKLMNOP"),
    (["curl", "https://alice:s3cret@example.com/x"], "s3cret"),
    (["curl", "-H", "Authorization: Bearer eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl"], "eyJzdWIiOiIx"),
    (["serve", "--token", "t0k3n"], "t0k3n"),
    (["serve", "--secret:xyz"], "xyz"),
    (["run", "--openai-api-key=sk-abcdefghijklmnopqrstuvwx"], "sk-abcdefghijklmnopqrstuvwx"),
    (["psql", "postgresql://u:pw@db/x"], "pw@"),
])
def test_secrets_are_replaced(argv, secret):
    line = redact_argv(argv)
    assert secret not in line
    assert REDACTED in line


def test_ordinary_arguments_survive():
    argv = ["python", "train.py", "--lr", "3e-4", "--batch-size", "32", "--data", "/mnt/imagenet"]
    assert redact_argv(argv) == " ".join(argv)
