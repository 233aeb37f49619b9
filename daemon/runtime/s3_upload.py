"""Upload snapshot files to S3 with boto3: multipart above a threshold, SSE-KMS and a storage
class when configured, a content type per file, and nothing secret in the object's metadata.

Credentials and the endpoint come from boto3's usual chain (instance role, environment,
~/.aws; AWS_ENDPOINT_URL_S3 for an S3-compatible store). A failed upload never deletes the
local file: `UploadResult.error` says why, in words, without any credential.
"""

from __future__ import annotations

import mimetypes
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from daemon import __version__, config
from daemon.sources.redact import redact_text
from daemon.store.snapshot import BadSnapshotRequest

MULTIPART_THRESHOLD = 8 << 20  # boto3's default: files above this go up in parts of this size
CONTENT_TYPES = {".db": "application/vnd.sqlite3", ".html": "text/html; charset=utf-8"}
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
ATTEMPTS = 3


# Said with every upload the daemon does for a client (the API, `mlcostd snapshot --upload`
# with a daemon running, `u` in mlcost-top): the shell's AWS_* variables never reach it.
DAEMON_CREDENTIALS = (
    "the daemon uploads with its own AWS credentials (its environment, its user's ~/.aws, or "
    "the instance role), not those of the shell that asked; give it credentials in its systemd "
    "unit (`systemctl edit mlcostd`: Environment=AWS_PROFILE=NAME, or "
    "EnvironmentFile=/etc/mlcost/aws.env with mode 0600, then `systemctl restart mlcostd`) or "
    "attach an instance role with s3:PutObject on the bucket")


def by_the_daemon(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upload results of an upload the daemon did for a client: each says whose credentials
    were used (`credentials`), and a failure's error ends with how to give the daemon some."""
    out = []
    for result in results:
        result = dict(result, credentials=DAEMON_CREDENTIALS)
        if not result.get("ok") and result.get("error"):
            result["error"] = f"{result['error']}. Note: {DAEMON_CREDENTIALS}"
        out.append(result)
    return out


class UploadError(BadSnapshotRequest):
    """An s3:// URL that cannot be used; the message shows the form."""


@dataclass(frozen=True)
class UploadResult:
    file: str
    url: str | None  # s3://bucket/key once uploaded
    ok: bool
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_s3_url(url: str) -> tuple[str, str]:
    """s3://BUCKET/PREFIX -> (bucket, prefix without slashes at its ends), by the config's rule
    (daemon.config.parse_s3_url: no '..' segment, a valid bucket name); UploadError if not."""
    try:
        return config.parse_s3_url(url)
    except ValueError as exc:
        raise UploadError(str(exc)) from None


def content_type(path: Path) -> str:
    return CONTENT_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or \
        "application/octet-stream"


def upload_files(files: list[Path], url: str, *, sse_kms_key_id: str = "",
                 storage_class: str = "", multipart_threshold: int = MULTIPART_THRESHOLD,
                 client: Any = None) -> list[UploadResult]:
    """Upload each file to s3://BUCKET/PREFIX/<name>. Never raises for a failed upload (the
    result says why); raises UploadError for a malformed URL."""
    bucket, prefix = parse_s3_url(url)
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config as BotoConfig

    if client is None:
        client = boto3.client("s3", config=BotoConfig(
            connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
            retries={"max_attempts": ATTEMPTS, "mode": "standard"}))
    transfer = TransferConfig(multipart_threshold=multipart_threshold,
                              multipart_chunksize=max(multipart_threshold, 5 << 20),
                              max_concurrency=4, use_threads=True)
    results = []
    for path in files:
        key = f"{prefix}/{path.name}" if prefix else path.name
        extra: dict[str, Any] = {
            "ContentType": content_type(path),
            # What the object is, never who sent it or with which credentials.
            "Metadata": {"mlcost-version": __version__, "mlcost-kind": "snapshot"},
        }
        if sse_kms_key_id:
            extra["ServerSideEncryption"] = "aws:kms"
            extra["SSEKMSKeyId"] = sse_kms_key_id
        if storage_class:
            extra["StorageClass"] = storage_class
        try:
            client.upload_file(str(path), bucket, key, ExtraArgs=extra, Config=transfer)
        except Exception as exc:  # boto3's errors are many; every one keeps the local file
            results.append(UploadResult(str(path), None, False, _why(exc, bucket, path)))
            continue
        results.append(UploadResult(str(path), f"s3://{bucket}/{key}", True))
    return results


def _why(exc: Exception, bucket: str, path: Path) -> str:
    """An upload failure in words, with the fix, and no credential in it."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
    )

    # boto3's S3UploadFailedError is raised while handling the error it describes: take the
    # first error along the chain that botocore names
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and len(chain) < 8:
        chain.append(link)
        link = link.__cause__ or link.__context__
    reason: BaseException = next((e for e in chain if isinstance(e, BotoCoreError | ClientError)),
                                 exc)
    if isinstance(reason, NoCredentialsError):
        text = ("no AWS credentials found (instance role, AWS_* environment or ~/.aws); the "
                "snapshot stays on disk")
    elif isinstance(reason, ClientError):
        code = reason.response.get("Error", {}).get("Code", "")
        message = reason.response.get("Error", {}).get("Message", "")
        if code == "NoSuchBucket":
            text = f"bucket {bucket!r} does not exist; check [snapshots].upload / --upload"
        elif code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            text = (f"S3 refused the upload to {bucket!r} ({code}); give this host's role "
                    "s3:PutObject (and kms:GenerateDataKey with SSE-KMS) on it")
        else:
            text = f"S3 answered {code or 'an error'}: {message}"
    elif isinstance(reason, EndpointConnectionError | BotoCoreError | OSError) or any(
            isinstance(e, ConnectionError) for e in chain):
        text = (f"could not reach S3 ({type(reason).__name__}: {reason}); check the network "
                "and copy the file by hand (aws s3 cp)")
    else:
        text = f"{type(reason).__name__}: {reason}"
    return redact_text(f"uploading {path.name} failed: {text}; the local file {path} is kept")
