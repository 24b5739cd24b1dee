"""Map inputs to results: in this process, or as tasks on Dask's distributed scheduler.

``Session(workers, scheduler).map(fn, items)`` runs ``fn(item)`` for every item and returns the results in item
order (``map_inputs``: one map, one session). With one worker it is a plain loop in this process (no Dask
import); with N it reads here too, beside a local cluster of N-1 processes started meanwhile; with a scheduler
address it uses a running cluster (``dask scheduler`` / ``dask worker``, dask-jobqueue, Kubernetes). Workers
read the inputs from the paths they are given: on a cluster they need the same files at the same paths (a
shared filesystem).

Faults, the same on every path: an item whose ``fn`` raises one of ``errors`` (an input it cannot read) goes to
``skip(key, error)`` in item order and is left out. On Dask, a task that raises anything else is retried
(``retries``), then skipped with its reason; a worker that dies has its tasks run again on another worker (the
scheduler's allowed-failures, 3 by default), and an input that kills every worker it runs on is skipped.
"""

from __future__ import annotations

import functools
import os
import pickle
import queue
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from profiler_kit.analyze.errors import READ_ERRORS, InputError

# Below this many bytes of input the default stays in this process. Measured 2026-11-27 (commit 2f2b29b, the
# 2-core VM under load 5-6, bench_workers.run on folders of copies of the shared amir-ghz and zx3xyy exports, the
# latter also replicated 32x): a local cluster cost ~2.3 CPU-s (the forkserver's imports 1.4-1.7 of it) and ~3.5 s
# of wall time; 2 workers against 1 on 17.6 MiB (32 small exports) 0.70x, 49.7 MiB (16) 0.76x, 66.7 MiB (2
# replicated) 0.56x, 133 MiB (4) 0.82x: even near 8 CPU-s of reading, ~200 MiB of exports. Kineto traces cost ~50x
# more per byte (``COST_PER_MIB``): 32 inputs, 12 of them Kineto, 55 MiB 1.05x, 134 MiB 1.31x, 241 MiB 1.54x
# (bench_workers.py --copies 1/4/8, load 7-11).
CLUSTER_MIN_BYTES = 256 * 2**20
LOCAL_WORKER_CONFIG = {
    # Dask's sampling profiler walks the task's stack every 10 ms: CPU taken from a task that holds the GIL, for
    # a dashboard nobody opens on a local cluster.
    "distributed.worker.profile.enabled": False,
    # Each server (the scheduler and nannies here, each worker) measured its event loop's lag every 20 ms and
    # the machine's load every 0.5 s: an idle cluster of one worker took 0.95 CPU-s here and 0.65 there per
    # 20 s, 0.34 and 0.23 with these (measured under load ~11).
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    # Workers fork from a server process that imported WORKER_PRELOAD once (a spawned worker imported pandas,
    # pyarrow and the readers itself: ~3 CPU-s each); its environment is this process's, tuned before pandas.
    "distributed.worker.multiprocessing-method": "forkserver",
}
WORKER_PRELOAD = (
    "distributed",
    "pandas",
    "pyarrow",
    "profiler_kit.build",
    "profiler_kit.build_diff",
    "profiler_kit.build_ddp",
    "profiler_kit.analyze.nsys_sqlite",
    "profiler_kit.analyze.kineto",
    "profiler_kit.analyze.breakdown",
)
# CPU-s per MiB of input by how its name ends, for the order inputs are handed out in (``costliest_first``);
# report of the shared captures on the 2-core VM, 2026-11-27: nsys SQLite exports 0.024-0.06, Kineto JSON
# 0.12-0.15 (two traces, gunzipped), the same gzipped 1.5-2.8. Any other file as an export.
COST_PER_MIB = {".sqlite": 0.04, ".json": 0.13, ".json.gz": 2.0, "": 0.04}
# Tasks a local worker holds at once: one runs, one waits, so the next starts without a round trip through this
# process (each took 20-80 ms under load).
QUEUED = 2
SCHEDULER_TIMEOUT_S = 10  # connecting to --scheduler; an address nothing listens on fails after this


@dataclass(frozen=True)
class _Failed:
    """What a task returns for an input it cannot read, instead of raising (raising would be retried)."""

    error: BaseException


def default_workers(paths: list, cores: int | None = None) -> int:
    """Workers when the user names none: one per core for several inputs of ``CLUSTER_MIN_BYTES`` or more, else 1."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if len(paths) < 2 or cores < 2:
        return 1
    total = 0
    for p in paths:
        try:
            total += os.stat(p).st_size
        except OSError:  # unreadable: its reading says why
            pass
    return min(cores, len(paths)) if total >= CLUSTER_MIN_BYTES else 1


def map_inputs(fn: Callable, items: Iterable, *, workers: int = 1, scheduler: str | None = None, **kw) -> list:
    """``Session(workers, scheduler).map(fn, items, **kw)``, the session closed after: one map, one cluster."""
    with Session(workers, scheduler) as session:
        return session.map(fn, items, **kw)


class Session:
    """Where maps run: this process (one worker, no scheduler), else Dask, kept for the session's next maps
    (``diff`` maps both sides, then maybe again per op) and closed on exit.

    With ``workers`` > 1 and no scheduler, this process is one of the workers: it starts a local cluster of
    ``workers - 1`` processes on a thread and reads inputs itself meanwhile, then shares the rest with them
    (``_shared``). The cluster's workers fork from a server that has imported pandas, pyarrow and the readers
    once (``WORKER_PRELOAD``). On exit the cluster closes on a thread the process waits for at its end, so the
    report is built meanwhile.
    """

    def __init__(self, workers: int = 1, scheduler: str | None = None):
        self.workers, self.scheduler = workers, scheduler
        self._client: _client | None = None
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None

    @property
    def on_dask(self) -> bool:
        return self.scheduler is not None or self.workers > 1

    def map(
        self,
        fn: Callable,
        items: Iterable,
        *,
        local: Callable | None = None,
        key: Callable = str,
        on_done: Callable | None = None,
        skip: Callable | None = None,
        errors: tuple = READ_ERRORS,
        retries: int = 1,
    ) -> list:
        """``[fn(item) for item in items]`` less the skipped, in item order; ``on_done(item)`` after each (progress).

        ``fn`` must be picklable (a module-level function or a functools.partial of one) when it runs on Dask.
        ``local``: what this process runs for an item instead of ``fn`` (default ``fn``).
        ``skip(key(item), error)`` takes each item that fails; without it the first failure is raised.
        """
        items = list(items)
        local = local or fn
        if not self.on_dask or not items:
            return _in_process(local, items, key, on_done, skip, errors)
        if self.scheduler is None:
            self._start_local()
            return _shared(self, fn, local, items, key, on_done, skip, errors, retries)
        if self._client is None:
            self._client = _client(self.workers, self.scheduler)
            self._client.__enter__()
        return _on_dask(self._client.client, fn, items, key, on_done, skip, errors, retries)

    def map_reading(self, fn: Callable, items: Iterable, *, cache=None, prefetched=None, **kw) -> list:
        """``map`` of ``fn(item, cache=, prefetched=)``, a reader of inputs: in this process with the command's
        ``cache`` (an ``analyze.trace_cache.CacheWriter``) and ``prefetched`` reads; on Dask each task writes
        its own cache, finished there, and the folders it wrote are added to ``cache``'s."""
        here = functools.partial(_with, fn, cache, prefetched)
        if not self.on_dask:
            return self.map(here, items, **kw)
        pairs = self.map(
            functools.partial(reading_task, fn, cache is not None),
            items,
            local=functools.partial(_no_folders, here),
            **kw,
        )
        if cache is not None:
            for _, folders in pairs:
                cache.add(folders)
        return [res for res, _ in pairs]

    def _start_local(self) -> None:
        """Start the local cluster on a thread (once), so this process reads inputs while it starts."""
        if self._starting is not None:
            return
        self._client = _client(self.workers - 1, None)

        def start():
            try:
                self._client.__enter__()
            except BaseException as err:  # said once the inputs are read here instead
                self._start_error = err

        self._starting = threading.Thread(target=start, name="profiler-kit-cluster-start", daemon=True)
        self._starting.start()

    def ready_client(self):
        """The local cluster's client once it has started (None while it starts, or if it failed)."""
        if self._starting is None or self._starting.is_alive() or self._start_error is not None:
            return None
        return self._client.client

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> bool:
        client, starting = self._client, self._starting
        self._client = self._starting = None
        if client is None:
            return False
        if starting is None:
            client.__exit__(*exc)
            return False

        def close():
            starting.join()
            client.__exit__(None, None, None)

        # not a daemon: the process waits for it at its end (process.run_and_exit), the report built meanwhile
        threading.Thread(target=close, name="profiler-kit-cluster-close").start()
        return False


def start_local_cluster(session: Session) -> None:
    """Start ``session``'s local cluster now, on a thread, where it will have one (``--workers N``, no scheduler):
    it starts while this process works on something else first (the first pass over an export read in windows)."""
    if session.scheduler is None and session.workers > 1:
        session._start_local()


def _with(fn, cache, prefetched, item):
    return fn(item, cache=cache, prefetched=prefetched)


def _no_folders(fn, item) -> tuple:
    """``reading_task``'s pair for an item read here: the command's own cache writer holds its folders."""
    return fn(item), []


def reading_task(fn: Callable, cache: bool, item) -> tuple:
    """``fn(item)`` as a Dask task, and the cache folders it wrote (``cache``: whether to write them), its
    writes finished there. A worker's first task prepares it (``process.prepare_worker``)."""
    from profiler_kit import process

    process.prepare_worker()
    if not cache:
        return fn(item), []
    from profiler_kit.analyze.trace_cache import CacheWriter

    writer = CacheWriter()
    result = fn(item, cache=writer)
    return result, writer.finish()


def _in_process(fn, items, key, on_done, skip, errors) -> list:
    out = []
    for item in items:
        try:
            out.append(fn(item))
        except errors as err:
            if skip is None:
                raise
            skip(key(item), err)
            continue
        if on_done:
            on_done(item)
    return out


def _guarded(fn, errors, item):
    """The task: ``fn(item)``, or ``_Failed`` for an input it cannot read (with an error the client can unpickle)."""
    try:
        return fn(item)
    except errors as err:
        try:
            pickle.loads(pickle.dumps(err))
        except Exception:  # an error that does not survive the trip: its words do
            err = InputError(f"{key_of(item)}: {type(err).__name__}: {err}")
        return _Failed(err)


def key_of(item) -> str:
    return str(getattr(item, "path", item))


def _on_dask(client, fn, items, key, on_done, skip, errors, retries) -> list:
    from distributed import as_completed

    order = _InOrder(items, key, on_done, skip)
    futures = client.map(functools.partial(_guarded, fn, errors), items, pure=False, retries=retries)
    index = {f.key: i for i, f in enumerate(futures)}
    try:
        for fut in as_completed(futures, loop=client.loop):
            i = index[fut.key]
            order.settle(i, _outcome(fut, key(items[i])))
    finally:
        client.cancel(futures)
    return order.out


class _InOrder:
    """Results as their tasks end, handed on in item order as the in-process loop does: what was read to
    ``out`` (``on_done`` called as each ends), what could not be to ``skip`` (raised without it)."""

    def __init__(self, items, key, on_done, skip):
        self.items, self.key, self.on_done, self.skip = items, key, on_done, skip
        self.results: list = [None] * len(items)
        self.done = [False] * len(items)
        self.out: list = []
        self.handed = 0

    @property
    def complete(self) -> bool:
        return self.handed >= len(self.items)

    def settle(self, i: int, res) -> None:
        self.results[i], self.done[i] = res, True
        if self.on_done and not isinstance(res, _Failed):
            self.on_done(self.items[i])
        while not self.complete and self.done[self.handed]:
            res, self.results[self.handed] = self.results[self.handed], None
            if isinstance(res, _Failed):
                if self.skip is None:
                    raise res.error
                self.skip(self.key(self.items[self.handed]), res.error)
            else:
                self.out.append(res)
            self.handed += 1


def _shared(session: Session, fn, local, items, key, on_done, skip, errors, retries) -> list:
    """Items shared between this process and the local cluster, the costliest first (``costliest_first``): each
    side takes the next item when it is free, so neither waits while the other has work left. This process reads
    from the start; the cluster's workers are fed as soon as it has started (not when this process ends its
    current item), ``QUEUED`` tasks each, topped up from Dask's callback thread as their tasks finish.
    """
    n = len(items)
    turn = costliest_first(items, key)
    lock = threading.RLock()
    state = {"next": 0, "stop": False}
    finished: queue.SimpleQueue = queue.SimpleQueue()  # (index, result) of the cluster's tasks, as they end
    futures: dict = {}
    task = functools.partial(_guarded, fn, errors)

    def take() -> int | None:
        with lock:
            if state["stop"] or state["next"] >= n:
                return None
            state["next"] += 1
            return turn[state["next"] - 1]

    def feed(client) -> None:
        with lock:  # submitted under the lock: none after the stop below
            i = take()
            if i is None:
                return
            fut = futures[i] = client.submit(task, items[i], pure=False, retries=retries)
        fut.add_done_callback(lambda f, i=i: fetch(client, i, f))

    def fetch(client, i: int, fut) -> None:
        """On Dask's callback thread as a task ends: the next one submitted, then this one's result brought
        here, so that this process's reading never waits for it (fetched between its items, each result cost
        it 0.1-0.3 s under load)."""
        feed(client)
        try:
            finished.put((i, _outcome(fut, key(items[i]))))
        except BaseException as err:  # an interrupt _outcome raises: raised by the map
            finished.put((i, err))

    def feed_once_started() -> None:
        session._starting.join()
        client = session.ready_client()
        for _ in range(QUEUED * (session.workers - 1) if client is not None else 0):
            feed(client)

    order = _InOrder(items, key, on_done, skip)

    def drain(block: bool) -> None:
        while not order.complete:
            try:
                i, res = finished.get(block=block)
            except queue.Empty:
                return
            if isinstance(res, BaseException):
                raise res
            order.settle(i, res)
            block = False

    threading.Thread(target=feed_once_started, name="profiler-kit-feed", daemon=True).start()
    try:
        while (i := take()) is not None:
            try:
                res = local(items[i])
            except errors as err:
                res = _Failed(err)
            order.settle(i, res)
            drain(block=False)
        while not order.complete:  # what the cluster still runs
            drain(block=True)
    finally:
        with lock:
            state["stop"] = True
            pending = [f for f in futures.values() if not f.done()]
        if pending:
            session._client.client.cancel(pending)
    if not futures and session._start_error is not None:
        sys.stderr.write(f"Warning: the local Dask cluster did not start ({session._start_error}); all read here\n")
    return order.out


def costliest_first(items: list, key: Callable) -> list[int]:
    """Indices of ``items``, the costliest to read first (``COST_PER_MIB`` by the size of the file ``key(item)``
    names; items that name no file last, in order), so that a map ends on short items: on 2 processes, 32 inputs
    in their order ended with one side idle for an export's whole read."""

    def cost(i: int) -> float:
        path = key(items[i])
        if not isinstance(path, os.PathLike):
            return 0.0
        try:
            size = os.stat(path).st_size
        except OSError:  # unreadable: its reading says why
            return 0.0
        name = os.fspath(path)
        per_mib = next((c for end, c in COST_PER_MIB.items() if name.endswith(end)), COST_PER_MIB[""])
        return size / 2**20 * per_mib

    return sorted(range(len(items)), key=lambda i: -cost(i))


def start_forkserver() -> None:
    """Start the server the local cluster's workers fork from, so that its imports (``WORKER_PRELOAD``, 1-2 CPU-s)
    run while this process has its own to do (a command with --workers N calls it first) or starts the scheduler
    (the cluster's start does), not after: Dask starts it when the first worker is asked for."""
    if LOCAL_WORKER_CONFIG["distributed.worker.multiprocessing-method"] != "forkserver":
        return
    from multiprocessing import forkserver

    forkserver.set_forkserver_preload(list(WORKER_PRELOAD))
    forkserver.ensure_running()


def _preload_forkserver() -> None:
    """The modules the forkserver imports before it forks workers: ``WORKER_PRELOAD`` in place of Dask's list
    (set by its first ``get_mp_context``, which would otherwise replace ours)."""
    from distributed.utils import get_mp_context

    ctx = get_mp_context()
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(list(WORKER_PRELOAD))


def _outcome(fut, name: str):
    """The result of a finished future, or ``_Failed`` for a task that erred or whose workers kept dying."""
    from distributed import KilledWorker

    if fut.status == "finished":
        try:
            return fut.result()
        except Exception as err:  # the result could not be brought back (a worker lost it, unpicklable)
            return _Failed(InputError(f"{name}: its result could not be fetched: {type(err).__name__}: {err}"))
    err = fut.exception()
    if isinstance(err, KilledWorker):
        return _Failed(InputError(f"{name}: every worker that read it died (out of memory?)"))
    if isinstance(err, KeyboardInterrupt):
        raise err
    return _Failed(InputError(f"{name}: its task failed: {type(err).__name__}: {err}"))


class _client:
    """A Dask client on a running scheduler, or on a local cluster of ``workers`` processes closed on exit."""

    def __init__(self, workers: int, scheduler: str | None):
        self.workers, self.scheduler = workers, scheduler
        self.cluster = self.client = None

    def __enter__(self):
        import logging

        if not self.scheduler:
            start_forkserver()
        from distributed import Client, LocalCluster

        if self.scheduler:
            try:
                self.client = Client(self.scheduler, timeout=SCHEDULER_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as err:
                raise InputError(f"cannot reach the Dask scheduler at {self.scheduler}: {err}") from None
            return self.client
        import dask

        with dask.config.set(LOCAL_WORKER_CONFIG):  # the nannies hand it to the workers they start
            _preload_forkserver()
            self.cluster = LocalCluster(
                n_workers=self.workers,
                threads_per_worker=1,  # the readers hold the GIL: one task per process
                processes=True,
                dashboard_address=":0",  # its HTTP server (health, metrics) on a free port, not 8787
                silence_logs=logging.CRITICAL,  # a worker lost mid-run is retried; its logs would only alarm
            )
        self.client = Client(self.cluster, set_as_default=False)
        return self.client

    def __exit__(self, *exc):
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        return False
