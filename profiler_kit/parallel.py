"""Map inputs to results: in this process, or as tasks on Dask's distributed scheduler.

One function, ``map_inputs``, runs ``fn(item)`` for every item and returns the results in item order. With one
worker it is a plain loop in this process (no Dask import); with several it starts a local cluster of that many
processes, and with a scheduler address it uses a running cluster (``dask scheduler`` / ``dask worker``,
dask-jobqueue, Kubernetes). Workers read the inputs from the paths they are given: on a cluster they need the
same files at the same paths (a shared filesystem).

Faults, the same on every path: an item whose ``fn`` raises one of ``errors`` (an input it cannot read) goes to
``skip(key, error)`` in item order and is left out. On Dask, a task that raises anything else is retried
(``retries``), then skipped with its reason; a worker that dies has its tasks run again on another worker (the
scheduler's allowed-failures, 3 by default), and an input that kills every worker it runs on is skipped.
"""

from __future__ import annotations

import functools
import os
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.sources import READ_ERRORS

# Below this many bytes of input the default stays in this process. A local cluster's fixed cost, measured on a
# 2-core machine under load ~9: 4.2 s to start, 2.2 s to close, ~3 CPU-s per spawned worker to import pandas and
# the readers again. benchmarks/bench_workers.py there: 32 inputs of 240 MiB in all ran 0.73x as fast on two
# workers, 880 MiB 1.24x; the threshold lies between (not measured on an idle machine).
CLUSTER_MIN_BYTES = 256 * 2**20
# Dask's sampling profiler walks the task's stack every 10 ms: CPU taken from a task that holds the GIL, for a
# dashboard nobody opens on a local cluster.
LOCAL_WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
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
    """Where maps run: this process (one worker, no scheduler), else a Dask cluster started at the first map
    that needs it and kept for the next ones (``diff`` maps both sides, then maybe again per op), closed on exit."""

    def __init__(self, workers: int = 1, scheduler: str | None = None):
        self.workers, self.scheduler = workers, scheduler
        self._client = None

    @property
    def on_dask(self) -> bool:
        return self.scheduler is not None or self.workers > 1

    def map(
        self,
        fn: Callable,
        items: Iterable,
        *,
        key: Callable = str,
        on_done: Callable | None = None,
        skip: Callable | None = None,
        errors: tuple = READ_ERRORS,
        retries: int = 1,
    ) -> list:
        """``[fn(item) for item in items]`` less the skipped, in item order; ``on_done(item)`` after each (progress).

        ``fn`` must be picklable (a module-level function or a functools.partial of one) when it runs on Dask.
        ``skip(key(item), error)`` takes each item that fails; without it the first failure is raised.
        """
        items = list(items)
        if not self.on_dask or not items:
            return _in_process(fn, items, key, on_done, skip, errors)
        if self._client is None:
            self._client = _client(self.workers, self.scheduler)
            self._client.__enter__()
        return _on_dask(self._client.client, fn, items, key, on_done, skip, errors, retries)

    def map_reading(self, fn: Callable, items: Iterable, *, cache=None, prefetched=None, **kw) -> list:
        """``map`` of ``fn(item, cache=, prefetched=)``, a reader of inputs: in this process with the command's
        ``cache`` (an ``analyze.trace_cache.CacheWriter``) and ``prefetched`` reads; on Dask each task writes
        its own cache, finished there, and the folders it wrote are added to ``cache``'s."""
        if not self.on_dask:
            return self.map(functools.partial(_with, fn, cache, prefetched), items, **kw)
        pairs = self.map(functools.partial(reading_task, fn, cache is not None), items, **kw)
        if cache is not None:
            for _, folders in pairs:
                cache.add(folders)
        return [res for res, _ in pairs]

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> bool:
        if self._client is not None:
            self._client.__exit__(*exc)
            self._client = None
        return False


def _with(fn, cache, prefetched, item):
    return fn(item, cache=cache, prefetched=prefetched)


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

    results: list = [None] * len(items)
    done = [False] * len(items)
    futures = client.map(functools.partial(_guarded, fn, errors), items, pure=False, retries=retries)
    index = {f.key: i for i, f in enumerate(futures)}
    out, next_i = [], 0
    try:
        for fut in as_completed(futures, loop=client.loop):
            i = index[fut.key]
            results[i] = _outcome(fut, key(items[i]))
            done[i] = True
            if on_done and not isinstance(results[i], _Failed):
                on_done(items[i])
            while next_i < len(items) and done[next_i]:  # hand on in item order, as the loop does
                res = results[next_i]
                results[next_i] = None
                if isinstance(res, _Failed):
                    if skip is None:
                        raise res.error
                    skip(key(items[next_i]), res.error)
                else:
                    out.append(res)
                next_i += 1
    finally:
        client.cancel(futures)
    return out


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

        from distributed import Client, LocalCluster

        if self.scheduler:
            try:
                self.client = Client(self.scheduler, timeout=SCHEDULER_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as err:
                raise InputError(f"cannot reach the Dask scheduler at {self.scheduler}: {err}") from None
            return self.client
        import dask

        with dask.config.set(LOCAL_WORKER_CONFIG):  # the nannies hand it to the workers they start
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
