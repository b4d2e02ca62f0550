"""Object stores: where the bytes of a large value live when the database keeps only its
reference (hash, size, location) in `blobs`.

    s3://bucket/prefix[?endpoint=http://host:port]   any S3-compatible store (AWS S3, MinIO,
                                                     Cloudflare R2, Ceph) through boto3
    file:///absolute/folder                          a local folder

An object is named by its content hash (`<prefix>/<hash>`), so the same value is one object
however many runs refer to it. A store's `location` (what a reference row records) is its URL
with the endpoint given in it and nothing else (never a credential): a process that was not
told the endpoint still finds the objects. Its `place` is the location less the endpoint: the
same bucket and prefix reached through another endpoint (a moved MinIO) is the same place.

Credentials, region and endpoint come from the usual AWS environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) or the
URL's `endpoint=`; never from a user part, which is refused. Every failure to reach the store
is an `ObjectStoreError` (a `StoreError`) naming it; a missing object is `ObjectMissing`. The
choice of what goes where (the threshold) and the verification of what comes back are
`blobs`'. Only objects named by a hash are ever listed or deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import threading
import urllib.parse
import uuid
from typing import Iterable, Optional

from ..errors import InvalidRequest, ObjectStoreError, StoreError

INLINE_MAX_DEFAULT = 256 * 1024  # REWIND_BLOB_INLINE_MAX: larger values go to the object store


_NAME = re.compile(r"[0-9a-f]{64}")  # what an object is named: nothing else is ever deleted


class ObjectMissing(Exception):
    """The object store holds no object of that name."""


def place_of(location: str) -> str:
    """Where the objects are: an S3 location less the endpoint it is reached through; a folder
    by its device and inode while it exists (a symlink or a bind mount to it is the same
    folder: gc and migrate must never take it for another), else by its real path."""
    base = str(location).split("?", 1)[0]
    if not base.startswith("file://"):
        return base
    root = os.path.realpath(urllib.parse.unquote(base[len("file://"):]))
    try:
        st = os.stat(root)
    except OSError:
        return f"file://{root}"
    return f"file:dev={st.st_dev},ino={st.st_ino}"


def is_object_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


def is_inline(url: Optional[str]) -> bool:
    """Whether a store setting means "every value in the database" (unset, empty, inline)."""
    return str(url or "").strip().lower() in ("", "inline")


def inline_max(value: Optional[str] = None) -> int:
    """The size above which a value goes to the object store (REWIND_BLOB_INLINE_MAX)."""
    raw = os.environ.get("REWIND_BLOB_INLINE_MAX") if value is None else value
    if raw is None or not str(raw).strip():
        return INLINE_MAX_DEFAULT
    try:
        n = int(str(raw).strip())
    except ValueError:
        n = -1
    if n < 0:
        raise InvalidRequest(f"REWIND_BLOB_INLINE_MAX must be a number of bytes >= 0, not {raw!r}",
                             field="REWIND_BLOB_INLINE_MAX")
    return n


class ObjectStore:
    """One object store. `location` is what a blob row records (its endpoint, no secret);
    `reads`/`writes` count objects fetched and stored by this process (benchmarks, tests)."""

    location: str = ""

    def __init__(self) -> None:
        self.reads = 0
        self.writes = 0

    def put(self, h: str, data: bytes) -> None: raise NotImplementedError

    def get(self, h: str) -> bytes: raise NotImplementedError

    @property
    def place(self) -> str:
        return place_of(self.location)

    def size(self, h: str) -> Optional[int]:
        """The stored object's size, None when there is none (no bytes travel)."""
        raise NotImplementedError

    def holds(self, h: str, data: bytes) -> bool:
        """Whether the object `h` holds exactly `data` (a write checks before it skips the
        upload: an object altered in place keeps its size)."""
        raise NotImplementedError

    def delete(self, hashes: Iterable[str]) -> None: raise NotImplementedError

    def listing(self) -> Iterable[tuple]:
        """(hash, size, modified epoch seconds) of every object under the location."""
        raise NotImplementedError

    def _fail(self, what: str, error: BaseException) -> StoreError:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        # the advice last, after "; ": a run's failure message puts it before `rewind resume`
        return ObjectStoreError(f"object store {self.location} could not {what}: {first}; check "
                                "that the object store is reachable and that the credentials "
                                "may read and write it")


class FileObjects(ObjectStore):
    """A local folder: one file per object, written whole (temporary file, then rename)."""

    def __init__(self, location: str, root: str):
        super().__init__()
        self.location, self.root = location, root

    def _path(self, h: str) -> str:
        return os.path.join(self.root, h)

    def put(self, h: str, data: bytes) -> None:
        try:
            os.makedirs(self.root, exist_ok=True)
            tmp = os.path.join(self.root, f".incoming-{uuid.uuid4().hex}")
            # 0666 less the umask, applied by the kernel (mkstemp's 0600 would hide the object
            # from a dashboard running as another user; os.umask is process-wide, not ours)
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, self._path(h))  # never a half-written object under its name
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as e:
            raise self._fail(f"store object {h[:12]}…", e) from None
        self.writes += 1

    def get(self, h: str) -> bytes:
        self.reads += 1
        try:
            with open(self._path(h), "rb") as f:
                return f.read()
        except FileNotFoundError:
            if not os.path.isdir(self.root):
                raise self._fail(f"read object {h[:12]}…", OSError(f"no folder {self.root}")) from None
            raise ObjectMissing(h) from None
        except OSError as e:
            raise self._fail(f"read object {h[:12]}…", e) from None

    def size(self, h: str) -> Optional[int]:
        try:
            return os.path.getsize(self._path(h))
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self._fail(f"check object {h[:12]}…", e) from None

    def holds(self, h: str, data: bytes) -> bool:
        try:
            with open(self._path(h), "rb") as f:
                return f.read(len(data) + 1) == data
        except FileNotFoundError:
            return False
        except OSError as e:
            raise self._fail(f"check object {h[:12]}…", e) from None

    def delete(self, hashes: Iterable[str]) -> None:
        for h in hashes:
            with contextlib.suppress(OSError):
                os.unlink(self._path(h))

    def listing(self) -> Iterable[tuple]:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if not is_object_name(name):  # an upload in progress (.incoming-), anything else
                continue
            with contextlib.suppress(OSError):
                st = os.stat(self._path(name))
                if stat.S_ISREG(st.st_mode):
                    out.append((name, st.st_size, st.st_mtime))
        return out


class S3Objects(ObjectStore):
    """An S3 bucket (or S3-compatible server) through boto3; the client is made on first use,
    so a store that never reads or writes a large value never imports boto3."""

    def __init__(self, location: str, bucket: str, prefix: str, endpoint: Optional[str]):
        super().__init__()
        self.location, self.bucket, self.prefix, self.endpoint = location, bucket, prefix, endpoint
        self._client = None
        self._lock = threading.Lock()

    @property
    def client(self):
        with self._lock:
            if self._client is None:
                try:
                    import boto3
                    from botocore.config import Config
                except ImportError:  # pragma: no cover - the `objects` extra is not installed
                    raise ObjectStoreError(f"object store {self.location} needs boto3; "
                                           "pip install 'rewind[objects]'") from None
                endpoint = self.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or \
                    os.environ.get("AWS_ENDPOINT_URL")
                config = Config(retries={"max_attempts": 3, "mode": "standard"},
                                connect_timeout=5, read_timeout=60,
                                # MinIO, moto, Ceph on a host name without bucket subdomains
                                s3={"addressing_style": "path"} if endpoint else None)
                region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") \
                    or "us-east-1"
                self._client = boto3.session.Session().client(
                    "s3", endpoint_url=endpoint, region_name=region, config=config)
            return self._client

    def _key(self, h: str) -> str:
        return f"{self.prefix}/{h}" if self.prefix else h

    def _call(self, what: str, fn, **kw):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kw)
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise ObjectMissing(kw.get("Key", "")) from None
            raise self._fail(what, e) from None
        except BotoCoreError as e:
            raise self._fail(what, e) from None

    def put(self, h: str, data: bytes) -> None:
        self._call(f"store object {h[:12]}…", self.client.put_object, Bucket=self.bucket,
                   Key=self._key(h), Body=data)
        self.writes += 1

    def get(self, h: str) -> bytes:
        self.reads += 1
        got = self._call(f"read object {h[:12]}…", self.client.get_object, Bucket=self.bucket,
                         Key=self._key(h))
        try:
            return got["Body"].read()
        except Exception as e:  # the connection dropped mid-body
            raise self._fail(f"read object {h[:12]}…", e) from None

    def _head(self, h: str) -> Optional[dict]:
        try:
            return self._call(f"check object {h[:12]}…", self.client.head_object,
                              Bucket=self.bucket, Key=self._key(h))
        except ObjectMissing:
            return None

    def size(self, h: str) -> Optional[int]:
        head = self._head(h)
        return None if head is None else int(head["ContentLength"])

    def holds(self, h: str, data: bytes) -> bool:
        head = self._head(h)
        if head is None or int(head["ContentLength"]) != len(data):
            return False
        # a single-part upload's ETag is the MD5 of its bytes (S3, MinIO, R2, Ceph); an ETag
        # of another form (a multipart or KMS-encrypted object) cannot be compared: upload again
        return str(head.get("ETag", "")).strip('"') == hashlib.md5(data).hexdigest()

    def delete(self, hashes: Iterable[str]) -> None:
        keys = [{"Key": self._key(h)} for h in hashes]
        for i in range(0, len(keys), 1000):  # S3's limit per request
            self._call("delete objects", self.client.delete_objects, Bucket=self.bucket,
                       Delete={"Objects": keys[i:i + 1000], "Quiet": True})

    def listing(self) -> Iterable[tuple]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else "")
        out = []
        for page in self._call("list objects", lambda: list(pages)):
            for o in page.get("Contents", []):
                name = o["Key"][len(self.prefix) + 1:] if self.prefix else o["Key"]
                if is_object_name(name):  # not one under a deeper prefix, nor another's file
                    out.append((name, int(o["Size"]), o["LastModified"].timestamp()))
        return out


_OPEN: dict = {}
_OPEN_LOCK = threading.Lock()


def open_objects(url: str, source: str = "blobs") -> ObjectStore:
    """The object store at `url` (one instance per URL per process: its client is reused).
    A URL that is neither s3://bucket[/prefix] nor file:///absolute/folder is an InvalidRequest
    naming `source`."""
    url = str(url).strip()
    with _OPEN_LOCK:
        # a row's location is the store opened from the same URL; one recorded without its
        # endpoint (or given it by the environment) is the store opened at that place, if one was
        got = _OPEN.get(url) or ("?" not in url and _OPEN.get(("place", url))) or None
        if got is None:
            got = _OPEN[url] = _parse(url, source)
            _OPEN.setdefault(("place", got.place), got)
        return got


def _shown(url: str) -> str:
    """A URL as an error message may show it: nothing before an `@` (a user part, however
    spelled), no options (either may hold a secret), at most 200 characters."""
    base = url.split("?", 1)[0].split("#", 1)[0]
    scheme, colon, rest = base.partition(":")
    if "@" in rest:
        rest = "//…@" + rest.rpartition("@")[2].lstrip("/")
    return f"{scheme}{colon}{rest}"[:200]


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # S3's rule, as MinIO and R2 keep it
_NO_USER = ("names no user or password; give credentials in AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY")


def _endpoint(value: str, source: str) -> str:
    """The `endpoint=` option, checked (never shown: it is where a secret would be pasted)."""
    there = urllib.parse.urlsplit(value)
    if "@" in value.split("?", 1)[0]:
        raise InvalidRequest(f"{source}: endpoint= {_NO_USER}", field=source)
    try:
        there.port  # noqa: B018 (a port that is no number raises here)
    except ValueError:
        there = None
    if there is None or there.scheme not in ("http", "https") or not there.hostname \
            or there.path not in ("", "/") or there.query or there.fragment:
        raise InvalidRequest(f"{source}: endpoint= must be http(s)://host[:port] and nothing "
                             "more", field=source)
    return value.rstrip("/")


def _parse(url: str, source: str) -> ObjectStore:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/") or parts.query or parts.fragment:
            raise InvalidRequest(f"{source}: {_shown(url)!r} is no file:///absolute/folder URL "
                                 "(three slashes, an absolute path, no options)", field=source)
        root = os.path.normpath(urllib.parse.unquote(parts.path))
        # quoted, so a folder named with `#`, `?` or `%` is the same folder read back from a row
        return FileObjects(f"file://{urllib.parse.quote(root)}", root)
    if parts.scheme == "s3" or url.startswith("s3:"):
        if "@" in url.split("?", 1)[0]:  # never echo it: it may hold a secret
            raise InvalidRequest(f"{source}: an s3:// URL {_NO_USER}", field=source)
        if parts.scheme != "s3" or not url.startswith("s3://"):
            raise InvalidRequest(f"{source}: {_shown(url)!r} is no s3://bucket/prefix URL "
                                 "(two slashes, then the bucket)", field=source)
        bucket, prefix = parts.netloc, parts.path.strip("/")
        if not bucket:
            raise InvalidRequest(f"{source}: {_shown(url)!r} names no bucket (s3://bucket/prefix)",
                                 field=source)
        if not _BUCKET.fullmatch(bucket):
            raise InvalidRequest(f"{source}: the bucket of an s3:// URL must be 3 to 63 lowercase "
                                 "letters, digits, dots or hyphens", field=source)
        endpoint = None
        for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            # neither shown: a mistyped option, or its value, may be a secret
            if name != "endpoint":
                raise InvalidRequest(f"{source}: an s3:// URL takes one option, "
                                     "endpoint=http(s)://host:port, and no other", field=source)
            if endpoint is not None:
                raise InvalidRequest(f"{source}: endpoint= is given twice; give it once",
                                     field=source)
            endpoint = _endpoint(value, source)
        if parts.fragment:
            raise InvalidRequest(f"{source}: an s3:// URL has no #fragment", field=source)
        place = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        location = f"{place}?endpoint={endpoint}" if endpoint else place
        return S3Objects(location, bucket, prefix, endpoint)
    raise InvalidRequest(f"{source}: {_shown(url)!r} is not an object store URL; use "
                         "s3://bucket/prefix or file:///absolute/folder" +
                         (" (or leave it unset: values stay in the database)"
                          if source != "--to" else " or inline"), field=source)
