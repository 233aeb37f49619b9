"""A program's own password options (`curl -u user:PASSWORD`, `sshpass -p PASSWORD`,
`redis-cli -a PASSWORD`) are hidden in every form the program takes them, wherever the program
comes: argv[0], after a wrapper, inside a shell's `-c` text or a stored command line (probe 141
H1: `curl --user bob:pw`, `-ubob:pw`, `redis-cli -ahunter2`, `env sshpass -p ...` and
`bash -c 'curl -u ...'` stayed in clear). The same options of other programs stay readable."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.sources.redact import REDACTED, redact_argv, redact_stored, redact_text

R = REDACTED


@pytest.mark.parametrize("argv, shown", [
    # curl: the long and glued forms, `=`, short flags before -u, the proxy's user, a client
    # certificate's password, a bearer token, a cookie given inline
    (["curl", "--user", "bob:pw123", "https://x"], f"curl --user bob:{R} https://x"),
    (["curl", "--user=bob:pw123", "https://x"], f"curl --user=bob:{R} https://x"),
    (["curl", "-ubob:pw123", "https://x"], f"curl -ubob:{R} https://x"),
    (["curl", "-fsSLu", "bob:pw123", "https://x"], f"curl -fsSLu bob:{R} https://x"),
    (["curl", "-fsSLubob:pw123", "https://x"], f"curl -fsSLubob:{R} https://x"),
    (["curl", "-x", "p:3128", "-U", "proxy:pw123", "--proxy-user=p2:pw456", "https://x"],
     f"curl -x p:3128 -U proxy:{R} --proxy-user=p2:{R} https://x"),
    (["curl", "-E", "client.pem:pw123", "--cert", "c.pem:pw456", "https://x"],
     f"curl -E client.pem:{R} --cert c.pem:{R} https://x"),
    (["curl", "--oauth2-bearer", "pw123", "-b", "session=pw456", "https://x"],
     f"curl --oauth2-bearer {R} -b {R} https://x"),
    (["/usr/bin/curl", "-u", "bob:pw123", "https://x"], f"/usr/bin/curl -u bob:{R} https://x"),
    # a token as curl's user name is hidden by its shape
    (["curl", "-u", "ghp_abcdefghijklmnopqrstuvwxyz0123:x-oauth-basic", "https://x"],
     f"curl -u {R}:{R} https://x"),
    # redis-cli (and keydb-cli): -a glued to its value, --pass=
    (["redis-cli", "-ahunter2", "ping"], f"redis-cli -a{R} ping"),
    (["redis-cli", "-h", "db", "--pass=hunter2"], f"redis-cli -h db --pass={R}"),
    (["keydb-cli", "-ahunter2"], f"keydb-cli -a{R}"),
    # long forms that name a secret, for any program: redis-cli's user name stays
    (["redis-cli", "--user", "alice", "--pass", "hunter2"], f"redis-cli --user alice --pass {R}"),
    (["curl", "--pass", "phrase1", "https://x"], f"curl --pass {R} https://x"),
    (["sshpass", "-phunter2", "ssh", "h"], f"sshpass -p{R} ssh h"),
    # after a wrapper, whatever its own options
    (["env", "sshpass", "-p", "hunter2", "ssh", "h"], f"env sshpass -p {R} ssh h"),
    (["env", "-i", "A=1", "/usr/bin/sshpass", "-p", "hunter2", "ssh", "h"],
     f"env -i A=1 /usr/bin/sshpass -p {R} ssh h"),
    (["sudo", "-u", "root", "curl", "-u", "bob:pw123", "https://x"],
     f"sudo -u root curl -u bob:{R} https://x"),
    (["timeout", "-s", "KILL", "60", "redis-cli", "-a", "hunter2", "ping"],
     f"timeout -s KILL 60 redis-cli -a {R} ping"),
    (["nice", "-n", "10", "xargs", "-n1", "curl", "--user=bob:pw123"],
     f"nice -n 10 xargs -n1 curl --user=bob:{R}"),
    # inside a shell's -c text, as cron and wrapper scripts run commands
    (["bash", "-c", "curl -u bob:pw123 https://x"], f"bash -c curl -u bob:{R} https://x"),
    (["sh", "-c", "sshpass -p hunter2 ssh h"], f"sh -c sshpass -p {R} ssh h"),
    (["bash", "-c", "redis-cli -a hunter2 ping"], f"bash -c redis-cli -a {R} ping"),
    (["bash", "-c", "cd /srv && exec /usr/bin/curl --user 'bob:pw 123' -s https://x"],
     f"bash -c cd /srv && exec /usr/bin/curl --user 'bob:{R}'  -s https://x"),
    (["bash", "-c", "x=$(curl -sSubob:pw123 https://x); echo $x"],
     f"bash -c x=$(curl -sSubob:{R} https://x); echo $x"),
])
def test_a_programs_password_options_are_hidden(argv, shown):
    assert redact_argv(argv) == shown
    assert redact_text(shown) == shown  # redacting again changes nothing


@pytest.mark.parametrize("text, shown", [
    # a stored command line read back, a log message: redact_text on the whole line
    ("curl -u bob:pw123 https://x", f"curl -u bob:{R} https://x"),
    ("curl --user bob:pw123 -ubob:pw456", f"curl --user bob:{R} -ubob:{R}"),
    ("redis-cli -ahunter2", f"redis-cli -a{R}"),
    ("env sshpass -p hunter2 ssh h", f"env sshpass -p {R} ssh h"),
    # shell-quoted, as profile.json and summary.md show a command: the quotes stay
    ("bash -c 'sleep 2' x '--password=<redacted>' 'curl -u bob:pw123'",
     f"bash -c 'sleep 2' x '--password=<redacted>' 'curl -u bob:{R}'"),
    ("sh -c 'sshpass -p hunter2 ssh h'", f"sh -c 'sshpass -p {R} ssh h'"),
    ("curl '-ubob:pw!23' https://x", f"curl '-ubob:{R}' https://x"),
    ("curl -u 'bob:pw 123' https://x", f"curl -u 'bob:{R}'  https://x"),
    ("a; curl -u bob:pw123\nredis-cli -a hunter2", f"a; curl -u bob:{R}\nredis-cli -a {R}"),
    ("x;curl -ubob:pw123", f"x;curl -ubob:{R}"),
])
def test_a_programs_password_options_are_hidden_in_a_text(text, shown):
    assert redact_text(text) == shown
    assert redact_stored(text) == shown
    assert redact_text(shown) == shown


@pytest.mark.parametrize("argv, shown", [
    # mongosh and mongo: -p is the password (the port is --port), separate or glued
    (["mongosh", "-u", "alice", "-p", "mongoPw1", "--quiet"], f"mongosh -u alice -p {R} --quiet"),
    (["mongosh", "mongodb://db/x", "--password", "mongoPw2"], f"mongosh mongodb://db/x --password {R}"),
    (["mongosh", "--password=mongoPw3"], f"mongosh --password={R}"),
    (["/usr/bin/mongo", "-u", "alice", "-pmongoPw4", "db/x"], f"/usr/bin/mongo -u alice -p{R} db/x"),
    # with no value mongosh asks for the password: the next word is an option or the URI
    (["mongosh", "-u", "alice", "-p", "--authenticationDatabase", "admin"],
     "mongosh -u alice -p --authenticationDatabase admin"),
    (["mongosh", "-u", "alice", "-p", "mongodb+srv://c.example.net/x"],
     "mongosh -u alice -p mongodb+srv://c.example.net/x"),
    (["mongosh", "-p", "-p", "mongoPw5"], f"mongosh -p -p {R}"),
    # OpenLDAP's clients: -w, after flags too (-xw); -W asks, -y names a file
    (["ldapsearch", "-x", "-D", "cn=admin", "-w", "ldapPw1", "-b", "dc=x"],
     f"ldapsearch -x -D cn=admin -w {R} -b dc=x"),
    (["ldapmodify", "-xw", "ldapPw2", "-f", "a.ldif"], f"ldapmodify -xw {R} -f a.ldif"),
    (["ldapadd", "-xwldapPw3"], f"ldapadd -xw{R}"),
    (["ldapdelete", "-ZZxw", "ldapPw4", "cn=x"], f"ldapdelete -ZZxw {R} cn=x"),
    (["ldapwhoami", "-x", "-w", "ldapPw5"], f"ldapwhoami -x -w {R}"),
    (["ldapsearch", "-x", "-W", "-y", "/run/ldap.pw"], "ldapsearch -x -W -y /run/ldap.pw"),
    (["ldappasswd", "-x", "-w", "ldapPw6", "-a", "ldapOld", "-s", "ldapNew"],
     f"ldappasswd -x -w {R} -a {R} -s {R}"),
    # lftp: -u user,PASSWORD (-p is its port; without a comma it asks)
    (["lftp", "-p", "2121", "-u", "bob,lftpPw1", "ftp.example.com"],
     f"lftp -p 2121 -u bob,{R} ftp.example.com"),
    (["lftp", "--user=bob,lftpPw2", "-u", "alice", "h"], f"lftp --user=bob,{R} -u alice h"),
    # and lftp's own `open -u` in the commands it runs (-c, -e), alone or after other commands
    (["lftp", "-c", "open -u bob,lftpPw4 ftp.example.com; get f"],
     f"lftp -c open -u bob,{R} ftp.example.com; get f"),
    (["lftp", "-e", "set ssl:verify-certificate no; open -d -u bob,lftpPw5 -p 21 h"],
     f"lftp -e set ssl:verify-certificate no; open -d -u bob,{R} -p 21 h"),
    (["lftp", "-c", "open -u bob ftp.example.com"], "lftp -c open -u bob ftp.example.com"),
    # Samba: -U user%PASSWORD (a DOMAIN\\ before the user), --user=; only after the %
    (["smbclient", "//srv/share", "-U", "bob%smbPw1"], f"smbclient //srv/share -U bob%{R}"),
    (["smbclient", "-L", "srv", "--user=EXAMPLE\\bob%smbPw2"],
     f"smbclient -L srv --user=EXAMPLE\\bob%{R}"),
    (["smbclient", "//srv/s", "-NUbob%smbPw3"], f"smbclient //srv/s -NUbob%{R}"),
    (["smbclient", "//srv/s", "-U", "bob", "-c", "ls"], "smbclient //srv/s -U bob -c ls"),
    (["rpcclient", "-U", "bob%smbPw4", "srv"], f"rpcclient -U bob%{R} srv"),
    # after wrappers, inside a shell's -c text, with the closing punctuation that follows
    (["sudo", "-u", "ops", "timeout", "30", "mongosh", "-p", "mongoPw6"],
     f"sudo -u ops timeout 30 mongosh -p {R}"),
    (["env", "LDAPTLS_REQCERT=never", "ldapsearch", "-x", "-w", "ldapPw7"],
     f"env LDAPTLS_REQCERT=never ldapsearch -x -w {R}"),
    (["bash", "-c", "x=$(ldapsearch -xw ldapPw8 -b dc=x); lftp -u bob,lftpPw3 h"],
     f"bash -c x=$(ldapsearch -xw {R} -b dc=x); lftp -u bob,{R} h"),
    (["sh", "-c", "smbclient //s/x -U 'bob%smb Pw5' -c ls && mongosh -u a -p mongoPw7"],
     f"sh -c smbclient //s/x -U 'bob%{R}'  -c ls && mongosh -u a -p {R}"),
])
def test_more_programs_password_options_are_hidden(argv, shown):
    """Probe 141's list, left from the last round: mongosh/mongo -p, OpenLDAP's -w, lftp -u
    user,PASSWORD, smbclient -U user%PASSWORD. Each in the program table, so in every form
    the table reads (glued, after `=`, after a wrapper, in a shell's text, a stored line)."""
    assert redact_argv(argv) == shown
    assert redact_text(shown) == shown
    assert redact_text(" ".join(argv)) == shown
    secrets = [w for w in " ".join(argv).replace("%", " ").replace(",", " ").split()
               if "Pw" in w or w in ("ldapOld", "ldapNew")]
    assert not [s for s in secrets if s in redact_text(" ".join(argv))]


@pytest.mark.parametrize("argv", [
    ["python", "-u", "train.py"], ["ps", "-u", "root"],
    # the same letters elsewhere: ssh's -w is a tunnel, wget's -U a user agent, grep's -p...
    ["ssh", "-w", "0:1", "h"], ["wget", "-U", "agent%20x", "u"], ["mongod", "-p", "x"],
    ["docker", "run", "-u", "1000:1000", "img"],  # another program's -u with a `:`
    ["ssh", "-p", "2222", "host"], ["grep", "-a", "-ahunter", "f"],
    # sshpass's options end at the command it runs: ssh's -p is a port
    ["sshpass", "-f", "/run/pw", "ssh", "-p", "2222", "h"],
    # curl without a password in them: no `:` (curl asks), a cookie jar's file name, a
    # certificate without its password, flags that take no value
    ["curl", "-u", "bob", "-b", "cookies.txt", "--cert", "/etc/ssl/c.pem", "-fsSL", "https://x"],
    ["redis-cli", "-h", "db", "ping"], ["apt-get", "install", "curl", "-y"],
    # a shell text: a program's options end with its command
    ["bash", "-c", "curl -s https://x | sort -u a:b; python -u t.py"],
    ["bash", "-c", "redis-cli ping && ps -u root"],
])
def test_other_programs_options_stay_readable(argv):
    assert redact_argv(argv) == " ".join(argv)
    assert redact_text(" ".join(argv)) == " ".join(argv)


@pytest.mark.parametrize("text, shown", [
    # a hidden value's closing punctuation in a text (a shell's -c string, a stored line, a
    # log message) is kept: it closes what opened before the value
    ("x=$(curl -u bob:pw123)", f"x=$(curl -u bob:{R})"),
    ("x=$(curl -u bob:pw123); echo $x", f"x=$(curl -u bob:{R}); echo $x"),
    ("x=$(curl -u 'bob:pw 123')", f"x=$(curl -u 'bob:{R}' )"),
    ("x=$(curl -u 'bob:pw123')", f"x=$(curl -u 'bob:{R}')"),
    ("(sshpass -p hunter2 ssh h; redis-cli -ahunter3)", f"(sshpass -p {R} ssh h; redis-cli -a{R})"),
    ("x=$(mysql -pS3cret -e 'select 1')", f"x=$(mysql -p{R} -e 'select 1')"),
    ("y=$(mysql -pS3cret)", f"y=$(mysql -p{R})"),
    ("z=$(vault --token abc123)", f"z=$(vault --token {R})"),
    ("connect(password=hunter2)", f"connect(password={R})"),
    ("Client(token=abc, url=u)", f"Client(token={R}, url=u)"),
    ("login(password='x').cursor()", f"login(password='{R}').cursor()"),
    ("[HF_TOKEN=abc]", f"[HF_TOKEN={R}]"),
    ("f(Bearer abc123)", f"f(Bearer {R})"),
    ("get(https://x/a?token=abc123)", f"get(https://x/a?token={R})"),
    # what is part of the secret stays hidden: no opener before it, or balanced in the value
    ("--password=pw)", f"--password={R}"),
    ("curl -u bob:pw)", f"curl -u bob:{R}"),
    ("f(password=g(x))", f"f(password={R})"),
])
def test_closing_punctuation_after_a_hidden_value_stays(text, shown):
    assert redact_text(text) == shown
    assert redact_text(shown) == shown


def test_another_programs_dash_u_user_colon_password_is_hidden_but_not_a_uid_gid():
    """`-u user:PASSWORD` is curl's form, which other clients copy (an S3 client, an internal
    tool): hidden for any program, as before program options had a table; `docker run -u
    1000:1000` (a uid:gid) stays, and `sort -u a:b` loses its file name's second half (the
    safe side)."""
    assert redact_argv(["mc", "-u", "alice:hunter2", "ls"]) == f"mc -u alice:{R} ls"
    assert redact_argv(["sort", "-u", "a:b"]) == f"sort -u a:{R}"
    assert redact_argv(["docker", "run", "-u", "1000:1000", "img"]) == \
        "docker run -u 1000:1000 img"


ROOT = Path(__file__).resolve().parents[2]
# Holds the simulated GPU for a second (the profile ticks four times a second): the store
# records the process, its command line read from /proc.
USES_GPU = ("from daemon.sim.device import Device\nwith Device(0) as gpu:\n"
            "    for _ in range(8):\n        gpu.kernel(0.125)\n")


def test_a_profile_shows_no_program_password_in_any_of_its_files(tmp_path):
    """End to end (probe 141 H1): `mlcostd profile -- CMD` on the simulated GPU, CMD's argv
    carrying curl's, redis-cli's and sshpass's passwords in the forms that leaked. None is in
    profile.json (the command, and the process the store recorded from /proc), summary.md,
    profile.html, the store, or what the profile printed."""
    out = tmp_path / "sec"
    command = [sys.executable, "-c", USES_GPU, "x", "--password=hunter1", "curl -u bob:pw123",
               "curl", "--user", "bob:pw456", "-ubob:pw789", "sh -c 'redis-cli -ahunter2 ping'",
               "env sshpass -p hunter3 ssh h"]
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "profile", "--out", str(out), "--simulate", "--",
         *command], capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    secrets = ["hunter1", "pw123", "pw456", "pw789", "hunter2", "hunter3"]
    names = sorted(p.name for p in out.iterdir())
    assert {"profile.json", "summary.md", "profile.html", "profile.db"} <= set(names), names
    for path in out.iterdir():
        data = path.read_bytes()
        assert not [s for s in secrets if s.encode() in data], path.name
    assert not [s for s in secrets if s in result.stdout + result.stderr], result.stderr
    doc = json.loads((out / "profile.json").read_text())
    command = doc["profile"]["command"]
    assert f"'curl -u bob:{R}' curl --user 'bob:{R}' '-ubob:{R}'" in command, command
    assert f"'sh -c '\"'\"'redis-cli -a{R} ping'\"'\"'' 'env sshpass -p {R} ssh h'" in command
    # the process the store recorded (read from /proc, redacted at the source)
    (recorded,) = [p["command"] for p in doc["processes"] if p["gpus"]]
    assert recorded.endswith(f" curl -u bob:{R} curl --user bob:{R} -ubob:{R} sh -c "
                             f"'redis-cli -a{R} ping' env sshpass -p {R} ssh h"), recorded
