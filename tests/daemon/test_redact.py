"""Command lines are redacted at the source, and every other path that carries outside text
(actions, webhooks, the log) goes through the same redaction: no secret is stored or shown."""

import json
import logging
import re
import subprocess
import sys

import pytest
from simhost import poll

from daemon.api import actions
from daemon.sources.redact import (
    REDACTED,
    RedactingFilter,
    is_secret_name,
    redact_argv,
    redact_code,
    redact_document,
    redact_text,
)

PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEApemBodyLineOne\npemBodyLineTwo==\n"
       "-----END RSA PRIVATE KEY-----")


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
    # a flag's value that starts with "-" is still its value
    (["train.py", "--password", "-hunter2"], "hunter2"),
    (["train.py", "--hf-token", "--looks-like-a-flag"], "looks-like-a-flag"),
    (["pg_dump", "PGPASSWORD=pgsecret"], "pgsecret"),
    # PEM blocks: in one argument, after a flag, unterminated, split over arguments
    (["serve", PEM], "pemBodyLine"),
    (["serve", "--tls-key-data=" + PEM], "pemBodyLine"),
    (["serve", "x" + PEM + "tail"], "pemBodyLine"),
    (["serve", "-----BEGIN PRIVATE KEY-----\nMIIEtruncatedBody"], "MIIEtruncatedBody"),
    (["echo", "-----BEGIN", "RSA", "PRIVATE", "KEY-----", "MIIEsplitBody", "splitTwo",
      "-----END", "RSA", "PRIVATE", "KEY-----"], "splitTwo"),
    (["gcloud", '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEjsonKey\\n-----END '
      'PRIVATE KEY-----\\n"}'], "MIIEjsonKey"),
    # token formats seen alone
    (["x", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.Zm9vYmFyYmF6"], "eyJzdWIiOiJjYW5hcnkifQ"),
    (["x", "ghp_0123456789abcdefghijABCDEFGHIJklmnop"], "ghp_0123456789"),
    (["x", "github_pat_11AAAAAAA0123456789_abcdefghijklmnopqrstuvwxyzABCDEF"], "abcdefghijklmnop"),
    (["x", "glpat-0123456789abcdefghij"], "glpat-0123456789"),
    (["x", "xoxb-123456789012-123456789012-abcdefABCDEF"], "abcdefABCDEF"),
    (["x", "https://hooks.slack.com/services/T0000/B0000/XXXXsecretXXXX"], "XXXXsecretXXXX"),
    (["x", "hf_abcdefghijklmnopqrstuvwxyz0123"], "hf_abcdefghij"),
    (["x", "sk-proj-abcdefghijklmnopqrstuvwxyz012345"], "abcdefghijklmnop"),
    (["x", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"], "abcdefghijklmnop"),
    # Azure and GCP
    (["az", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=azureKEY0123+/==;"
      "EndpointSuffix=core.windows.net"], "azureKEY0123"),
    (["az", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;"
      "SharedAccessKey=sbKEY0123456789="], "sbKEY0123456789"),
    (["azcopy", "https://acct.blob.core.windows.net/c?sv=2022-11-02&se=2030-01-01&sig=sasSIG%2B%3D"],
     "sasSIG"),
    (["x", "SharedAccessSignature sr=ns&sig=sbSIG0123%3D&se=1700000000&skn=Root"], "sbSIG0123"),
    (["x", "A" * 62 + "azure0123456789012345678=="], "azure0123456789"),  # 88 chars
    (["x", "--maps-key", "AIzaSyA0123456789abcdefghijklmnopqrstu"], "AIzaSyA0123456789"),
    (["x", "https://maps.googleapis.com/x?key=AIzaSyA0123456789abcdefghijklmnopqrstu"], "AIzaSy"),
    (["x", "ya29.a0AfH6SMBabcdefghijklmnopqrstuvwxyz"], "a0AfH6SMB"),
    (["x", "--client-secret", "GOCSPX-abcdefghijklmnopqrstuvwx"], "GOCSPX-abcdef"),
    (["curl", "-H", "X-Api-Key: headerSecret123"], "headerSecret123"),
    (["curl", "-H", "Cookie: session=cookieSecret"], "cookieSecret"),
    (["x", "--conf=db.password=nestedSecret"], "nestedSecret"),
    # issue 20 item 5
    (["mysql", "-uroot", "-pmysqlSecret"], "mysqlSecret"),
    (["x", "--private-key-data", "keyDataSecret"], "keyDataSecret"),
    (["x", "--client-secret-value", "clientSecretValue"], "clientSecretValue"),
    (["sqlcmd", "-P", "bigPSecret"], "bigPSecret"),
    (["vault", "login", "token", "bareTokenSecret"], "bareTokenSecret"),
    # quoted values, and names alone with their sign (a probe found each in clear)
    (["w.py", "--db-password='Hunter2Quoted'"], "Hunter2Quoted"),
    (["env", 'HF_TOKEN="hfQuotedValue"'], "hfQuotedValue"),
    (["x", "--api-key='two words'"], "two words"),
    (["x", "DB_PASSWORD='dbQuoted'"], "dbQuoted"),
    (["python", "-c", "login(password='pyCallSecret')"], "pyCallSecret"),
    (["x", "--api-key=", "spacedAfterEquals"], "spacedAfterEquals"),
    (["x", "PASSWORD:", "spacedAfterColon"], "spacedAfterColon"),
    (["x", "--password", "--", "afterDoubleDash"], "afterDoubleDash"),
    (["curl", "-u", "user:curlUserSecret", "https://x"], "curlUserSecret"),
    (["sshpass", "-p", "sshpassSecret", "ssh", "host"], "sshpassSecret"),
    (["redis-cli", "-a", "redisSecret"], "redisSecret"),  # probe 138
    (["/usr/bin/redis-cli", "-h", "db", "-a", "redisSecret2", "ping"], "redisSecret2"),
    # an authorization's scheme and credential as arguments of their own (a header not quoted)
    (["curl", "-H", "Authorization:", "Bearer", "splitBearerTok", "https://x"], "splitBearerTok"),
    (["x", "--auth", "Bearer", "authFlagTok"], "authFlagTok"),
    (["x", "Basic", "YWxhZGRpbjpvcGVuc2VzYW1l"], "YWxhZGRpbjpvcGVuc2VzYW1l"),
])
def test_secrets_are_replaced(argv, secret):
    line = redact_argv(argv)
    assert secret not in line
    assert REDACTED in line


@pytest.mark.parametrize("argv", [
    ["python", "train.py", "--lr", "3e-4", "--batch-size", "32", "--data", "/mnt/imagenet"],
    # ML arguments that contain a secret-looking word but are not secrets
    ["vllm", "serve", "--max-tokens", "512", "--tokenizer", "t5-base", "--key-size", "2048",
     "--max-num-batched-tokens", "8192", "--author", "alice"],
    ["ssh", "--ssh-key-file", "/home/alice/.ssh/id_ed25519", "--no-auth", "host"],
    ["python", "-m", "torch.distributed.run", "--rdzv-endpoint=10.0.0.1:29500", "train.py"],
    ["curl", "https://example.com/a:b?page=2"],
    ["ps", "-u", "root"], ["ssh", "-p", "2222", "host"], ["grep", "-a", "pattern", "f"], ["x", '--lr="3e-4"', 'name="run 7"'],
])
def test_ordinary_arguments_survive(argv):
    assert redact_argv(argv) == " ".join(argv)


def test_pem_hides_only_the_block_and_the_arguments_after_it_survive():
    line = redact_argv(["serve", "--cert", "/etc/ssl/c.pem", PEM, "--port", "8443"])
    assert line == f"serve --cert /etc/ssl/c.pem {REDACTED} --port 8443"


@pytest.mark.parametrize("name, secret", [
    ("--hf-token", True), ("AWS_SECRET_ACCESS_KEY", True), ("--apikey", True),
    ("PGPASSWORD", True), ("--auth", True), ("--max-tokens", False), ("--tokenizer", False),
    ("--token-file", False), ("--no-auth", False), ("--author", False),
])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_an_authorizations_scheme_stays_and_its_credential_goes_as_in_a_text():
    argv = ["curl", "-H", "Authorization:", "Bearer", "tok123", "-u", "bob:pw", "https://x"]
    shown = f"curl -H Authorization: Bearer {REDACTED} -u bob:{REDACTED} https://x"
    assert redact_argv(argv) == shown == redact_text(" ".join(argv))
    assert redact_argv(["x", "--password", "basic"]) == f"x --password {REDACTED}"


@pytest.mark.parametrize("argv, shown", [
    # probe F1: with no space after the name's `:` only the scheme was hidden, not the token
    (["curl", "-H", "Authorization:Bearer Zq7xK9mWp2VbN4rT", "https://api.x"],
     f"curl -H Authorization:Bearer {REDACTED} https://api.x"),
    (["curl", "-H", "authorization:Bearer Zq7xK9mWp2VbN4rT"],
     f"curl -H authorization:Bearer {REDACTED}"),
    (["curl", "-H", "Authorization:Token Zq7xK9mWp2VbN4rT"],
     f"curl -H Authorization:Token {REDACTED}"),
    # the name and scheme one argument, the credential the next
    (["curl", "-H", "Authorization:Bearer", "Zq7xK9mWp2VbN4rT"],
     f"curl -H Authorization:Bearer {REDACTED}"),
    (["curl", "-H", "Authorization: Bearer", "Zq7xK9mWp2VbN4rT"],
     f"curl -H Authorization: Bearer {REDACTED}"),
    (["curl", "-HAuthorization:Bearer", "Zq7xK9mWp2VbN4rT"],
     f"curl -HAuthorization:Bearer {REDACTED}"),
    # GitHub's `token` scheme stays after an authorization's name, as Bearer does
    (["curl", "-H", "Authorization: token Zq7xK9mWp2VbN4rT"],
     f"curl -H Authorization: token {REDACTED}"),
    (["curl", "-H", "Authorization:", "token", "Zq7xK9mWp2VbN4rT"],
     f"curl -H Authorization: token {REDACTED}"),
    (["env", "HTTP_AUTHORIZATION=Basic Zq7xK9mWp2VbN4rT"],
     f"env HTTP_AUTHORIZATION=Basic {REDACTED}"),
])
def test_an_authorizations_credential_goes_whatever_the_space_after_its_name(argv, shown):
    assert redact_argv(argv) == shown
    assert redact_text(shown) == shown


@pytest.mark.parametrize("text, shown", [
    ("curl -H authorization:Bearer Zq7xK9mWp2VbN4rT https://x",
     f"curl -H authorization:Bearer {REDACTED} https://x"),
    ("curl -H 'Authorization: token Zq7xK9mWp2VbN4rT' https://x",
     f"curl -H 'Authorization: token {REDACTED}' https://x"),
    ("x=$(curl -H Authorization:Token Zq7xK9mWp2VbN4rT)",
     f"x=$(curl -H Authorization:Token {REDACTED})"),
    # a scheme after any secret name with `=`: it stays, the credential goes
    ("serve --auth=Bearer Zq7xK9mWp2VbN4rT --port 80", f"serve --auth=Bearer {REDACTED} --port 80"),
])
def test_an_authorizations_credential_goes_in_a_text(text, shown):
    assert redact_text(text) == shown
    assert redact_text(shown) == shown


@pytest.mark.parametrize("argv, secret", [
    # probe F2: the code forms redact_code hides, in an interpreter's code argument
    (["python", "-c", "import os; os.environ['HF_TOKEN']='pyEnvSecret'; import train"],
     "pyEnvSecret"),
    (["python", "-c", "import openai; openai.api_key = 'pyAttrSecret'"], "pyAttrSecret"),
    (["python3.11", "-c", "import os;os.environ[\"HF_TOKEN\"]=\"noSpaceSecret\""],
     "noSpaceSecret"),
    (["/opt/conda/bin/pypy3", "-c", "cfg.hf_token: str = 'annotatedSecret'"], "annotatedSecret"),
    (["node", "-e", "const token = 'nodeSecret'"], "nodeSecret"),
    (["node", "--eval", "process.env['API_KEY']='nodeEnvSecret'"], "nodeEnvSecret"),
    (["perl", "-e", 'my $password = "perlSecret"; print 1'], "perlSecret"),
    (["ruby", "-e", "ENV['DB_PASSWORD']='rubySecret'"], "rubySecret"),
    # whatever runs the interpreter: a shell's text, a wrapper
    (["bash", "-c", "python -c \"import openai; openai.api_key = 'nestedSecret'\""],
     "nestedSecret"),
    (["sudo", "-u", "ml", "python3", "-c", "if token == 'cmpSecret': pass"], "cmpSecret"),
])
def test_secrets_in_a_programs_code_argument_are_hidden(argv, secret):
    line = redact_argv(argv)
    assert secret not in line and REDACTED in line, line
    assert redact_text(line) == line


@pytest.mark.parametrize("argv", [
    ["python", "-c", "import time\nwhile True: time.sleep(1)"],
    ["python", "-c", "max_tokens = 512; key_size = 2048; tokens = tokenize(x)"],
    ["python", "-c", "import jax; key = jax.random.PRNGKey(0); print(key)"],  # a call's result
    ["tar", "-c", "-f", "out.tar", "data"], ["python", "train.py", "-c", "configs/7b.yaml"],
    ["sed", "-e", "s/key_size=1/key_size=2/", "f"], ["node", "-e", "console.log(1 + 2)"],
])
def test_code_without_a_secret_is_kept(argv):
    assert redact_argv(argv) == " ".join(argv)


@pytest.mark.parametrize("argv, secret", [
    # probe F3: numbered and plural names, Rails' secret, a password file's content
    (["x", "--password2=numberedSecret"], "numberedSecret"),
    (["x", "--password1", "numberedSecret1"], "numberedSecret1"),
    (["x", "--passwords=pluralSecret"], "pluralSecret"),
    (["x", "--secrets=pluralSecret2"], "pluralSecret2"),
    (["x", "--api-keys=a1Secret,b2Secret"], "a1Secret"),
    (["x", "--access-tokens", "accessTokSecret"], "accessTokSecret"),
    (["rails", "--secret_key_base=railsBaseSecret"], "railsBaseSecret"),
    (["x", "--password_file_content=fileContentSecret"], "fileContentSecret"),
    # a list of arguments in one argument (JSON, a Python repr)
    (["x", '--config-json=["--password","jsonListSecret"]'], "jsonListSecret"),
    (["x", '["--password","bareListSecret"]'], "bareListSecret"),
    (["x", "['--api-key', 'reprListSecret', '--lr', '3e-4']"], "reprListSecret"),
    # YAML, TOML and INI in one argument
    (["x", "--cfg=db:\n  password: yamlSecret"], "yamlSecret"),
    (["x", "--cfg=- name: a\n  token: 'yamlQuoted'"], "yamlQuoted"),
    (["x", '--toml=password = "tomlSecret"'], "tomlSecret"),
    (["x", "--x=password = iniSecret"], "iniSecret"),
    (["x", "--ini=[db]\npassword = iniLineSecret\nhost = h"], "iniLineSecret"),
    # URLs: OAuth's implicit-flow fragment, `auth`, `pass`, any secret-looking parameter
    (["x", "https://h/cb#access_token=fragmentSecret&token_type=bearer"], "fragmentSecret"),
    (["x", "https://h/?auth=authParamSecret"], "authParamSecret"),
    (["x", "https://h/?pass=passParamSecret"], "passParamSecret"),
    (["x", "https://h/?a=1&auth_token=authTokenParam"], "authTokenParam"),
    # `--token= VALUE` inside one argument (a shell's text)
    (["bash", "-c", "serve --token= spacedTextSecret --port 80"], "spacedTextSecret"),
    # a name glued after punctuation
    (["x", "x|password=pipeSecret"], "pipeSecret"),
    (["x", "x+password=plusSecret"], "plusSecret"),
    (["x", "x@password=atSecret"], "atSecret"),
    (["x", "x>password=gtSecret"], "gtSecret"),
    # a value that starts with a space a shell does not split at
    (["x", "--password=\u00a0nbspSecret"], "nbspSecret"),
    (["x", "--password=\u3000ideoSecret"], "ideoSecret"),
    # percent-encoded signs
    (["x", "--token%3DpctSecret"], "pctSecret"),
    (["x", "https://h/?password%3DpctUrlSecret"], "pctUrlSecret"),
    (["x", "https://h/cb?next=%2Fx%3Ftoken%3DpctNestedSecret"], "pctNestedSecret"),
    # invisible and fullwidth characters in the name
    (["x", "--pass\u00adword=softHyphenSecret"], "softHyphenSecret"),
    (["x", "--password\u200b=zeroWidthSecret"], "zeroWidthSecret"),
    (["x", "--\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44=fullwidthSecret"], "fullwidthSecret"),
])
def test_the_probes_low_forms_are_hidden(argv, secret):
    line = redact_argv(argv)
    assert secret not in line and REDACTED in line, line
    assert redact_text(line) == line


@pytest.mark.parametrize("text, secret", [
    # the same in a text (a stored line, a log message), where the code forms do not apply
    ("job: run --token= textSpacedSecret --port 80", "textSpacedSecret"),
    ("[db]\npassword = textIniSecret\nhost = h", "textIniSecret"),
    ("db:\n  - token: textYamlSecret", "textYamlSecret"),
    ('args=["--hf-token", "textListSecret"]', "textListSecret"),
    ("x|password=textPipeSecret", "textPipeSecret"),
])
def test_the_probes_low_forms_are_hidden_in_a_text(text, secret):
    shown = redact_text(text)
    assert secret not in shown and REDACTED in shown, shown
    assert redact_text(shown) == shown


def test_a_name_after_punctuation_hides_its_value_only():
    """A name counts after any punctuation (`x|password=`), but after `;` `&` `?` `#` a
    parameter's value ends at the next `;` or `&`: a connection string keeps what follows its
    key (the first cut of that change hid `;EndpointSuffix=...` with it)."""
    assert redact_text("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=k1+/==;"
                       "EndpointSuffix=core.windows.net") == (
        f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={REDACTED};"
        "EndpointSuffix=core.windows.net")
    assert redact_text("a;token=t1&lr=3e-4 x|password=p1 y") == \
        f"a;token={REDACTED}&lr=3e-4 x|password={REDACTED} y"


@pytest.mark.parametrize("argv", [
    # plurals and numbers that are ML arguments, not secrets
    ["x", "--max-tokens=512", "--num-keys=8", "--tokens-per-batch=4096", "--special-tokens=3"],
    ["x", "--tokens", "1e9", "--keys", "input,label", "--sort-keys", "--layer2=4"],
    ["x", "--password-file", "/run/secrets/db", "--token-file=/run/secrets/hf"],
    ["x", "https://h/?page=2&max_tokens=5#section-2"], ["x", "a|b=c", "x>y=z"],
    ["x", "--cfg=db:\n  host: h\n  port: 5432"], ["x", "--toml=lr = 3e-4"],
])
def test_ml_arguments_near_the_low_forms_survive(argv):
    assert redact_argv(argv) == " ".join(argv)


def test_redaction_is_stable_when_applied_twice():
    argv = ["train.py", "--token", "abc", PEM, "HF_TOKEN=hf_abcdefghijklmnopqrstuv"]
    once = redact_argv(argv)
    assert redact_text(once) == once


def test_webhook_bodies_are_redacted_whole():
    body = {"summary": "job python x.py --token=abc123 spent $5",
            "detail": {"command": "curl https://u:pw1@h", "api_key": "plainvalue"},
            "list": ["ghp_0123456789abcdefghijABCDEFGHIJklmnop"], "spent": 5.0}
    text = json.dumps(redact_document(body))
    for secret in ("abc123", "pw1", "plainvalue", "ghp_0123"):
        assert secret not in text
    assert redact_document(body)["spent"] == 5.0


def test_the_log_filter_redacts_messages_and_tracebacks(caplog):
    logger = logging.getLogger("mlcost.test.redact")
    redacting = RedactingFilter()
    caplog.handler.addFilter(redacting)
    try:
        logger.warning("starting %s", "python x.py --api-key logSecret1")
        try:
            raise RuntimeError("bad HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz")
        except RuntimeError:
            logger.exception("failed")
    finally:
        caplog.handler.removeFilter(redacting)
    assert "logSecret1" not in caplog.text and "hf_abcdefghij" not in caplog.text
    assert "starting python x.py --api-key <redacted>" in caplog.text


def test_the_sigterm_dry_run_shows_the_redacted_command_line():
    # A real process whose argv carries a PEM block and a flag value that starts with "-".
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--password", "-dryRunSecret",
            PEM]
    proc = subprocess.Popen(argv)
    try:
        import psutil

        target = psutil.Process(proc.pid)
        # Until the child has exec'd, its /proc cmdline is still the parent's (or empty).
        poll(lambda: target.cmdline() == argv, 10, "the child's argv in /proc")
        start = target.create_time()
        rec = {"id": "rec-kill", "rule": "idle_gpu_held", "target": "x",
               "action": {"kind": "sigterm", "pid": proc.pid, "start_time": start}}
        dry = actions.apply(rec, True)
        shown = dry.message + " ".join(dry.steps)
        assert f"pid {proc.pid}" in dry.message and "--password <redacted>" in shown
        assert "dryRunSecret" not in shown and "pemBodyLine" not in shown
    finally:
        proc.kill()
        proc.wait()


def test_the_sigterm_dry_run_shows_a_long_command_line_cut_visibly():
    """`--connection-file kernel-3f2c9a1e.json` past the cut read `kernel-3f2c9`: another file's
    name, with no sign that it was cut."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--padding", "x" * 60,
            "--connection-file", "kernel-3f2c9a1e.json"]
    proc = subprocess.Popen(argv)
    try:
        import psutil

        from daemon.sources.procs import read_argv

        # Until the child has exec'd, its /proc cmdline is still the parent's (or empty).
        poll(lambda: read_argv(proc.pid) == argv, 10, "the child's argv in /proc")
        start = psutil.Process(proc.pid).create_time()
        rec = {"id": "rec-kill", "rule": "idle_gpu_held", "target": "x",
               "action": {"kind": "sigterm", "pid": proc.pid, "start_time": start}}
        (step,) = actions.apply(rec, True).steps
        assert step.endswith("…") and len(step.split("# ", 1)[1]) == 120, step
    finally:
        proc.kill()
        proc.wait()


def test_flag_values_inside_one_string_are_hidden():
    assert redact_text("run --lr --token abc --api-key -x") == \
        f"run --lr --token {REDACTED} --api-key {REDACTED}"


def test_a_documents_process_key_is_not_taken_for_a_secret():
    event = {"key": "4242:1000.500", "api_key": "hidden", "token": "hidden"}
    assert redact_document(event) == {"key": "4242:1000.500", "api_key": REDACTED,
                                      "token": REDACTED}


@pytest.mark.parametrize("line, secret", [
    ('DB_PASSWORD = "s3cr3t-hunter2"; cfg.get()\n', "s3cr3t-hunter2"),
    ("self.api_key: str = 'sk-proj-abc'", "sk-proj-abc"),
    ('if token == "let-me-in":', "let-me-in"),
    ('os.environ["HF_TOKEN"] = "hf_x1"', "hf_x1"),
    ('conn = connect(host="db", password = f"{user}-pw")', "-pw"),
    ("SECRET_KEY = b'\\x01\\x02'", "x01"),
    ("password = hunter2  # the default", "hunter2"),
    ('client = Client(token="abc", url="https://u:pw@host/x")', "pw@"),
])
def test_a_source_line_quoted_in_evidence_has_its_secrets_hidden(line, secret):
    """A frame's line (a classification reason quotes it) is code: a secret-looking name is
    given its value with spaces around the sign, an annotation, or as a subscript's key."""
    shown = redact_code(line)
    assert secret not in shown and REDACTED in shown, shown


@pytest.mark.parametrize("line", [
    "time.sleep(5)\n", "max_tokens = 512", "for key, value in d.items(): total += value",
    "key = (pid, start)", 'torch.save(state, "ckpt.pt")', "tokens = tokenizer(text)",
])
def test_a_source_line_without_a_secret_is_kept(line):
    assert redact_code(line) == line


def test_a_long_source_line_is_cut_before_it_is_redacted():
    shown = redact_code("x = 1; " * 2000 + 'password = "hunter2"')
    assert len(shown) < 4200 and "hunter2" not in shown and shown.endswith("characters>")


def test_frame_and_thread_names_are_redacted_where_py_spy_is_read():
    """A process names its functions, files and threads: py-spy's dump of one whose function
    is named like an AWS key id, whose file sits in a folder `password=...` and whose thread is
    named like an API key came into the daemon as written (the live test:
    tests/faults/test_hostile_frames.py). Ordinary names are left as they are."""
    from daemon.sources.frames import parse_dump

    dump = json.dumps([{
        "thread_id": 7, "thread_name": "sk-abcdefghijklmnopqrstuvwxyz123456", "active": True,
        "frames": [
            {"name": "AKIAIOSFODNN7EXAMPLE", "filename": "/srv/password=hunter2/train.py",
             "line": 2},
            {"name": "LlamaDecoderLayer.forward",
             "filename": "/opt/venv/lib/python3.11/site-packages/transformers/models/llama/"
                         "modeling_llama.py", "line": 310},
            {"name": "<module>", "filename": "<frozen runpy>", "line": 88}]}])
    [thread] = parse_dump(dump)
    assert thread.thread_name == REDACTED
    assert [(f.name, f.filename) for f in thread.frames] == [
        (REDACTED, "/srv/password=" + REDACTED),
        ("LlamaDecoderLayer.forward",
         "/opt/venv/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py"),
        ("<module>", "<frozen runpy>")]


def test_a_storage_walks_error_names_the_folder_redacted(tmp_path, monkeypatch):
    """A storage walk's error names the folder it could not read, a folder a user made and
    named: it is shown in /v1/now and stored as the walk's meter reading."""
    import os

    from daemon.analysis import meters

    hostile = tmp_path / "u" / "password=hunter2"
    hostile.mkdir(parents=True)
    scandir = os.scandir

    def refusing(path):
        if str(path) == str(hostile):
            raise PermissionError(13, "Permission denied")
        return scandir(path)

    monkeypatch.setattr(meters.os, "scandir", refusing)
    [item] = meters.storage_cost([str(tmp_path)])
    assert not item.complete and item.error is not None
    assert "hunter2" not in item.error and "password=" + REDACTED in item.error, item.error


def test_two_names_that_differ_only_in_a_secret_stay_two_and_a_clean_one_is_kept():
    """A meter's name keys its readings, a pod's its workload: two that redact to one text
    (a URL's token, two pods named like two keys) keep a 4-hex tag each, of the name as
    written, the same on every way out; a name with nothing hidden is left as it is. Where a
    tag after the name would read as a secret flag's value, it goes first."""
    from daemon.sources.redact import redact_name

    first = redact_name("svc http://h:9100/metrics?token=hunter2 requests_total")
    second = redact_name("svc http://h:9100/metrics?token=AKIAIOSFODNN7EXAMPLE requests_total")
    assert first != second
    for name in (first, second):
        assert re.fullmatch(r"svc http://h:9100/metrics\?token=<redacted> requests_total "
                            r"\[[0-9a-f]{4}\]", name), name
    assert redact_name("svc http://h:9100/metrics?token=hunter2 requests_total") == first
    assert redact_name("/data/ckpt") == "/data/ckpt"
    flagged = redact_name("ghp_abcdefghijklmnopqrstuvwxyz0123456789 --api-key")
    assert re.fullmatch(r"\[[0-9a-f]{4}\] <redacted> --api-key", flagged), flagged
    assert redact_name(flagged) == flagged
