"""Model downloads from the Hugging Face Hub: pick the GGUF file, fetch it, report progress.

`resolve` turns a repo id or Hub URL (and an optional quantization) into one file to fetch;
`fetch` downloads it with `huggingface_hub` into `<models_dir>/<owner>/<repo>/`, LM Studio's
layout. `Downloads` is the server's job table behind `POST /api/v1/models/download`: each job
runs in a daemon thread (a stalled transfer never holds up shutdown) and only writes plain
fields that the status route reads. The Hub is `HF_ENDPOINT` (huggingface_hub's own setting).
huggingface_hub is imported on first use: it costs a server start that never downloads 0.2 s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from sluicegate.core.ids import new_id

log = logging.getLogger(__name__)

Json = dict[str, Any]
Status = Literal["downloading", "completed", "failed", "cancelled"]
HUB_HOSTS = {"huggingface.co", "www.huggingface.co", "hf.co"}
METADATA_TIMEOUT = 20.0
# A quantization label in a GGUF file name: Q4_K_M, IQ3_XXS, Q8_0, F16, BF16, ...
QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d+(?:_[A-Z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.IGNORECASE)


class DownloadError(Exception):
    """The request cannot be served as asked (bad reference, no such quantization): a 400.

    `param` names the request field to fix.
    """

    def __init__(self, message: str, param: str = "model") -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Target:
    """One file to fetch, and where it goes."""

    repo_id: str
    revision: str  # the commit the listing came from, so the file matches it
    filename: str
    size: int | None
    folder: Path  # <models_dir>/<owner>/<repo>
    # The repository's vision projector beside the model file, fetched with it (first, so the
    # server finds it beside the model when the model arrives).
    projector: str | None = None
    projector_size: int | None = None

    @property
    def destination(self) -> Path:
        return self.folder / self.filename

    def files(self) -> list[tuple[str, int | None]]:
        """What to fetch, in order: the projector, then the model."""
        first = [(self.projector, self.projector_size)] if self.projector is not None else []
        return [*first, (self.filename, self.size)]

    @property
    def total_size(self) -> int | None:
        sizes = [size for _, size in self.files()]
        return None if any(size is None for size in sizes) else sum(s or 0 for s in sizes)


def parse_model_ref(text: str) -> tuple[str, str | None, str | None]:
    """`owner/name`, or a Hub URL (`…/owner/name`, `…/blob|resolve/REV/FILE`) → repo, rev, file."""
    text = text.strip()
    if "://" in text:
        url = urlsplit(text)
        hosts = HUB_HOSTS | {urlsplit(hub_endpoint()).netloc}
        if url.scheme not in ("http", "https") or url.netloc.lower() not in hosts:
            raise DownloadError(f"{text!r} is not a Hugging Face Hub URL (https://huggingface.co/OWNER/REPO)")
        parts = [p for p in url.path.split("/") if p]
    else:
        parts = [p for p in text.split("/") if p]
    if len(parts) < 2 or (len(parts) > 2 and (parts[2] not in ("blob", "resolve", "tree") or len(parts) < 4)):
        raise DownloadError(f"{text!r} is not a Hub repository: expected OWNER/REPO or a huggingface.co URL")
    if {parts[0], parts[1]} & {".", ".."}:  # the repository's folder would not be its own
        raise DownloadError(f"{text!r} is not a Hub repository: expected OWNER/REPO or a huggingface.co URL")
    repo_id = f"{parts[0]}/{parts[1]}"
    if len(parts) == 2:
        return repo_id, None, None
    filename = "/".join(parts[4:]) or None
    if parts[2] == "tree":  # a folder view names a revision, not a file
        filename = None
    return repo_id, parts[3], filename


def hub_endpoint(endpoint: str | None = None) -> str:
    from huggingface_hub import constants

    return endpoint or constants.ENDPOINT


def inside(folder: Path, path: Path) -> bool:
    """`path` is under `folder`, by the text of both once `..` and absolute parts are applied.

    Every path this module writes is checked here, whatever the Hub lists and whatever
    huggingface_hub refuses. Symbolic links are the user's own and are not followed."""
    root = os.path.normpath(os.path.abspath(folder))
    full = os.path.normpath(os.path.abspath(path))
    return full != root and os.path.commonpath([root, full]) == root


def _outside(repo_id: str, filename: str) -> DownloadError:
    return DownloadError(f"Repository {repo_id!r} lists {filename!r}, a path outside the models directory.")


def quantization_of(filename: str) -> str | None:
    match = QUANT.search(Path(filename).name)
    return match[1].upper() if match else None


def is_model_gguf(filename: str) -> bool:
    """A GGUF that is a model: vision projectors ride along with some, but are never the model."""
    return filename.lower().endswith(".gguf") and "mmproj" not in filename.lower()


def pick_file(repo_id: str, files: dict[str, int | None], quantization: str | None) -> str:
    """The GGUF file to fetch: the one matching `quantization`, or the only one there is."""
    ggufs = sorted(f for f in files if is_model_gguf(f))
    if not ggufs:
        raise DownloadError(f"Repository {repo_id!r} has no .gguf files; only GGUF models can be downloaded.")
    choices = ", ".join(f"{quantization_of(f) or '?'} ({f})" for f in ggufs)
    if quantization is None:
        if len(ggufs) == 1:
            return ggufs[0]
        raise DownloadError(
            f"Repository {repo_id!r} has {len(ggufs)} GGUF files; choose one with `quantization`: {choices}",
            "quantization",
        )
    wanted = quantization.upper()
    matches = [f for f in ggufs if quantization_of(f) == wanted]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise DownloadError(
            f"Repository {repo_id!r} has no {quantization} GGUF file; available: {choices}", "quantization"
        )
    raise DownloadError(
        f"Repository {repo_id!r} has {len(matches)} {quantization} files (split or variant models are "
        f"not supported yet): {', '.join(matches)}",
        "quantization",
    )


# Which projector of several: full-precision ones first, as LM Studio and llama-server's -hf pick.
_PROJECTOR_ORDER = ("f16", "bf16", "f32", "q8_0")


def pick_projector(files: dict[str, int | None], model: str) -> str | None:
    """An `mmproj*.gguf` in the model file's folder of the repository, if there is one."""
    folder = str(Path(model).parent)
    found = [
        f for f in files if Path(f).name.lower().startswith("mmproj") and f.lower().endswith(".gguf")
        and str(Path(f).parent) == folder
    ]  # fmt: skip

    def rank(name: str) -> tuple[int, str]:
        tag = re.split(r"[-_.]", Path(name).stem.lower())[-1]  # mmproj-model-F16 -> f16
        return (_PROJECTOR_ORDER.index(tag) if tag in _PROJECTOR_ORDER else len(_PROJECTOR_ORDER)), name

    return min(found, key=rank) if found else None


@dataclass(slots=True, frozen=True)
class GgufFile:
    filename: str
    quantization: str | None
    size: int | None


def _repo_files(
    repo_id: str, revision: str | None, endpoint: str | None
) -> tuple[str | None, dict[str, int | None]]:
    """A repository's commit and its files' sizes, from the Hub (blocking)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HFValidationError

    try:
        info = HfApi(endpoint=endpoint).model_info(
            repo_id, revision=revision, files_metadata=True, timeout=METADATA_TIMEOUT
        )
    except HFValidationError as exc:
        raise DownloadError(f"{repo_id!r} is not a valid repository id: {exc}") from exc
    sizes: dict[str, int | None] = {}
    for sibling in info.siblings or []:
        lfs = sibling.lfs
        sizes[sibling.rfilename] = sibling.size if sibling.size is not None else (lfs.size if lfs else None)
    return info.sha, sizes


def gguf_files(ref: str, endpoint: str | None = None) -> list[GgufFile]:
    """The model files (GGUFs, projectors left out) of a repository (blocking: run it off the
    loop). Raises like `resolve`."""
    repo_id, revision, _ = parse_model_ref(ref)
    _, sizes = _repo_files(repo_id, revision, endpoint)
    folder = Path(repo_id)  # where in the models directory they would go
    return [
        GgufFile(name, quantization_of(name), size)
        for name, size in sorted(sizes.items())
        if is_model_gguf(name) and inside(folder, folder / name)
    ]


def resolve(ref: str, quantization: str | None, models_dir: Path, endpoint: str | None = None) -> Target:
    """Ask the Hub what the repo holds and pick the file (blocking: run it off the loop).

    Raises `DownloadError` for what the caller asked wrong, and huggingface_hub's errors (repo
    not found, network) for what went wrong on the way.
    """
    repo_id, revision, filename = parse_model_ref(ref)
    folder = models_dir / repo_id
    if not inside(models_dir, folder):
        raise DownloadError(f"{ref!r} is not a Hub repository: expected OWNER/REPO or a huggingface.co URL")
    sha, sizes = _repo_files(repo_id, revision, endpoint)
    if filename is not None:
        if filename not in sizes:
            raise DownloadError(f"Repository {repo_id!r} has no file {filename!r}.")
        if quantization is not None and quantization_of(filename) != quantization.upper():
            raise DownloadError(
                f"The URL names {filename!r}, which is not a {quantization} file.", "quantization"
            )
    else:
        filename = pick_file(repo_id, sizes, quantization)
    if not inside(folder, folder / filename):
        raise _outside(repo_id, filename)
    projector = pick_projector({k: v for k, v in sizes.items() if inside(folder, folder / k)}, filename)
    return Target(
        repo_id=repo_id,
        revision=sha or revision or "main",
        filename=filename,
        size=sizes.get(filename),
        folder=folder,
        projector=projector,
        projector_size=sizes.get(projector) if projector is not None else None,
    )


def is_present(target: Target) -> bool:
    for filename, size in target.files():
        path = target.folder / filename
        if not path.is_file() or (size is not None and path.stat().st_size != size):
            return False
    return True


def fetch(
    target: Target, *, progress: Callable[[int], Any] | None = None, endpoint: str | None = None
) -> Path:
    """Download the projector (if any) and the model into place (blocking); returns the model's
    path. `progress(bytes fetched before this file)` gives each file's `tqdm_class` for
    huggingface_hub; None: its own bar."""
    from huggingface_hub import hf_hub_download

    for filename, _ in target.files():  # a Target made elsewhere is checked too
        if not inside(target.folder, target.folder / filename):
            raise _outside(target.repo_id, filename)
    target.folder.mkdir(parents=True, exist_ok=True)
    before = 0
    path = ""
    for filename, size in target.files():
        path = hf_hub_download(
            target.repo_id,
            filename,
            revision=target.revision,
            local_dir=target.folder,
            endpoint=endpoint,
            tqdm_class=progress(before) if progress is not None else None,
        )
        if not inside(target.folder, Path(path)):  # what the library says it wrote, too
            raise _outside(target.repo_id, filename)
        before += size or 0
    return Path(path)


def describe(exc: BaseException, ref: str, endpoint: str | None = None) -> str:
    """A Hub failure in one line a user can act on."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(exc, RepositoryNotFoundError):
        return f"Repository {ref!r} was not found on the Hub (or it is private or gated)."
    if isinstance(exc, RevisionNotFoundError):
        return f"Revision not found in {ref!r}."
    if isinstance(exc, HfHubHTTPError):
        return f"The Hub refused the download of {ref!r}: {str(exc).splitlines()[0]}"
    return f"Could not download {ref!r} from {hub_endpoint(endpoint)}: {type(exc).__name__}: {exc}"


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Cancelled(Exception):
    """Raised inside the transfer to stop it (a cancel, or the server shutting down)."""


@dataclass(slots=True)
class DownloadJob:
    job_id: str
    ref: str
    target: Target | None
    status: Status = "downloading"
    total_bytes: int | None = None
    downloaded_bytes: int = 0
    started_at: float = field(default_factory=time.time)
    completed_at: float | None = None
    error: str | None = None
    cancelled: bool = False  # the server is shutting down
    cancel_requested: bool = False  # a client asked to stop it
    _clock_start: float = field(default_factory=time.monotonic)

    def progress(self, count: int) -> None:
        if self.cancelled:
            raise Cancelled("the server is shutting down")
        if self.cancel_requested:
            raise Cancelled("cancelled")
        self.downloaded_bytes += count

    def finish(self, error: str | None = None) -> None:
        self.error = error
        # A cancel that came after the last chunk leaves the file whole: that is a completion.
        self.status = ("cancelled" if self.cancel_requested else "failed") if error else "completed"
        self.completed_at = time.time()
        if not error and self.total_bytes is not None:
            self.downloaded_bytes = self.total_bytes

    def body(self) -> Json:
        """LM Studio's download status; `error`, `model`, `file` and `path` are Sluicegate's."""
        out: Json = {"job_id": self.job_id, "status": self.status, "model": self.ref}
        if self.target is not None:
            out |= {"file": self.target.filename, "path": str(self.target.destination)}
            if self.target.projector is not None:
                out["projector"] = self.target.projector
        out |= {
            "total_size_bytes": self.total_bytes,
            "downloaded_bytes": self.downloaded_bytes,
            "started_at": _iso(self.started_at),
        }
        if self.status == "downloading":
            elapsed = time.monotonic() - self._clock_start
            speed = self.downloaded_bytes / elapsed if elapsed > 0 else 0.0
            out["bytes_per_second"] = round(speed)
            if speed > 0 and self.total_bytes:
                remaining = (self.total_bytes - self.downloaded_bytes) / speed
                out["estimated_completion"] = _iso(time.time() + remaining)
        else:
            out["completed_at"] = _iso(self.completed_at)
        if self.error:
            out["error"] = self.error
        return {k: v for k, v in out.items() if v is not None}


def _progress_for(job: DownloadJob) -> Callable[[int], type]:
    """What huggingface_hub calls as its `tqdm_class`, for a file after `before` bytes of the
    job's other files: counts bytes into the job, draws nothing."""
    return lambda before: _progress_class(job, before)


def _progress_class(job: DownloadJob, before: int) -> type:
    class Progress:
        def __init__(self, *args: Any, total: int | None = None, initial: int = 0, **kwargs: Any) -> None:
            if total is not None and (job.target is None or job.target.projector is None):
                job.total_bytes = total  # one file: the Hub's count is the job's
            job.downloaded_bytes = before + initial

        def __enter__(self) -> Progress:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def update(self, count: int = 1) -> None:
            job.progress(count)

        def close(self) -> None:
            return None

    return Progress


class Downloads:
    """The server's download jobs, by id; one job per file at a time."""

    def __init__(
        self,
        models_dir: Path,
        endpoint: str | None = None,
        on_downloaded: Callable[[Path], None] | None = None,
    ) -> None:
        self.models_dir = models_dir
        self.endpoint = endpoint
        self.jobs: dict[str, DownloadJob] = {}
        # Called on the event loop with each finished file, so the server can serve it at once.
        self.on_downloaded = on_downloaded
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self, job_id: str) -> DownloadJob | None:
        return self.jobs.get(job_id)

    async def start(self, ref: str, quantization: str | None) -> DownloadJob | Target:
        """A running job for the file, or the `Target` itself when it is already downloaded.

        `DownloadError` (the caller's mistake) propagates; a Hub that does not know the repo or
        cannot be reached gives a job that has already failed, with the reason.
        """
        self._loop = asyncio.get_running_loop()
        job = DownloadJob(new_id("job_", 10), ref, None)
        try:
            target = await asyncio.to_thread(resolve, ref, quantization, self.models_dir, self.endpoint)
        except DownloadError:
            raise
        except Exception as exc:
            log.warning("download of %s failed: %s", ref, exc)
            job.finish(describe(exc, ref, self.endpoint))
            self.jobs[job.job_id] = job
            return job
        if is_present(target):
            if self.on_downloaded is not None:
                self.on_downloaded(target.destination)
            return target
        for running in self.jobs.values():
            if running.status == "downloading" and running.target == target:
                return running
        job.target, job.total_bytes = target, target.total_size
        self.jobs[job.job_id] = job
        threading.Thread(
            target=self._run, args=(job, target), name=f"download-{job.job_id}", daemon=True
        ).start()
        return job

    def _run(self, job: DownloadJob, target: Target) -> None:
        try:
            fetch(target, progress=_progress_for(job), endpoint=self.endpoint)
        except Exception as exc:
            if job.cancel_requested and not job.cancelled:
                log.info("download %s of %s cancelled", job.job_id, target.filename)
                job.finish("cancelled")
                return
            log.warning("download %s of %s failed: %s", job.job_id, target.filename, exc)
            job.finish(describe(exc, job.ref, self.endpoint))
            return
        log.info("downloaded %s to %s", target.filename, target.destination)
        if self.on_downloaded is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self.on_downloaded, target.destination)
        job.finish()

    def cancel(self, job_id: str) -> DownloadJob | None:
        """Stop a running job at its next chunk (it ends `cancelled`); None: no such job."""
        job = self.jobs.get(job_id)
        if job is not None and job.status == "downloading":
            job.cancel_requested = True
        return job

    async def options(self, ref: str) -> list[GgufFile]:
        """The GGUF files a repository offers, to choose a quantization from."""
        return await asyncio.to_thread(gguf_files, ref, self.endpoint)

    def close(self) -> None:
        """Stop every transfer at its next chunk."""
        for job in self.jobs.values():
            job.cancelled = True
