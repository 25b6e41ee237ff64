"""The ranks of impl/sharded.py: a persistent pool of `world` worker processes on torch.distributed.

Why a pool: the checks run inside one Python process under Hypothesis, an example costs a few forward
calls, and starting `world` processes (torch, Triton, a process group) costs seconds. So the pool is
started on first use, reused for every call, and shut down at exit (atexit). Workers are spawned
(torch.multiprocessing, "spawn": a fork would copy a CUDA context or the interpreter's patched state),
join a process group at 127.0.0.1 on a free port, gloo on the CPU (they inherit TRITON_INTERPRET: the
Triton interpreter, as impl/__init__.py selects it) and NCCL on CUDA (rank r on cuda:r).

Each call sends the same task to every rank (a checkpoint directory, the implementation's registry
name, the dtype, input ids, mask, the whole-model state as HybridState bytes) and waits for every
rank's answer: its logits, the gathered whole-model state (bytes) and its decision log. A rank that
raises answers with its traceback; a rank that dies, or no answer within the call's timeout, ends the
pool: ShardedWorkerError names the rank (and carries its traceback), never a hang; the next call starts
a fresh pool.

`load(checkpoint_dir, world, ...)` is the public face: ShardedModel.forward(input_ids, attention_mask,
state) -> (logits, state), like impl.model.Model's, with `ranks` holding every rank's last answer.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import pathlib
import queue
import socket
import time
import traceback
from typing import Optional

import numpy as np
import torch

import impl  # noqa: F401  (TRITON_INTERPRET before triton loads: the spawned ranks inherit it)

__all__ = ["ShardedWorkerError", "Pool", "pool", "shutdown", "ShardedModel", "load"]

STARTUP_SECONDS = 300.0     # spawn + imports + process group, on a loaded 2-core machine
CALL_SECONDS = 600.0        # one forward on every rank (interpreted Triton is slow; CUDA compiles first)
COLLECTIVE_SECONDS = 300.0  # a collective whose peer never comes (gloo / NCCL timeout)
POLL_SECONDS = 0.5          # how often a wait looks for dead ranks


class ShardedWorkerError(RuntimeError):
    """A rank raised (its traceback follows), died, or did not answer in time; the pool is gone."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_devices(world: int, device_type: str) -> None:
    """On CUDA each rank takes one device: world must not exceed what this host has."""
    if device_type == "cuda":
        n = torch.cuda.device_count()
        if world > n:
            from impl.sharded import ShardingError
            raise ShardingError(f"world: {world} ranks on CUDA need {world} devices (rank r on cuda:r), "
                                f"this host has {n}")
    elif device_type != "cpu":
        raise ValueError(f"device: {device_type!r}, expected 'cpu' (gloo) or 'cuda' (NCCL)")


@contextlib.contextmanager
def _bare_main():
    """While ranks are spawned, `__main__` is an empty module: spawn would otherwise re-run the caller's
    script in every rank (a script without an `if __name__ == "__main__"` guard would start pools
    recursively; `glmgate` would re-import the whole CLI). The ranks need nothing from it: their entry
    point and arguments live in importable modules."""
    import sys
    import types
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class Pool:
    """`world` ranks in one process group, each serving tasks from its own queue. Construction only
    spawns them: the first `collect` waits for them to join, so their start overlaps the caller's work."""

    def __init__(self, world: int, device_type: str = "cpu", startup_seconds: float = STARTUP_SECONDS):
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            from impl.sharded import ShardingError
            raise ShardingError(f"world: {world!r}, expected an integer >= 1 (ranks)")
        check_devices(world, device_type)
        ctx = torch.multiprocessing.get_context("spawn")
        self.world, self.device_type, self.seq, self.closed = world, device_type, 0, False
        self.startup_seconds, self.ready = startup_seconds, False
        self.tasks = [ctx.Queue() for _ in range(world)]
        self.results = ctx.Queue()
        port = _free_port()
        self.procs = [ctx.Process(target=_serve, args=(r, world, port, device_type, self.tasks[r], self.results),
                                  name=f"glmgate-shard-{r}-of-{world}", daemon=True) for r in range(world)]
        with _bare_main():
            for p in self.procs:
                p.start()

    def submit(self, task: dict) -> int:
        """Queue `task` on every rank; its number, for `collect` (a task never collected, a warm-up,
        is still checked: a rank that fails it fails the next collect)."""
        if self.closed:
            raise ShardedWorkerError("the pool is shut down")
        self.seq += 1
        for q in self.tasks:
            q.put((self.seq, task))
        return self.seq

    def collect(self, seq: int, timeout: float = CALL_SECONDS, what: str = "a task") -> list:
        """Every rank's answer to task `seq`, in rank order."""
        if not self.ready:
            self._collect(0, self.startup_seconds, "starting")
            self.ready = True
        return self._collect(seq, timeout, what)

    def call(self, task: dict, timeout: float = CALL_SECONDS) -> list:
        """Send `task` to every rank; each rank's answer, in rank order."""
        return self.collect(self.submit(task), timeout, f"task {task.get('op')!r}")

    def _collect(self, seq: int, timeout: float, what: str) -> list:
        got, deadline = {}, time.monotonic() + timeout
        while len(got) < self.world:
            try:
                s, rank, ok, payload = self.results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(self.procs) if not p.is_alive()]
                if dead:
                    self.close(force=True)
                    raise ShardedWorkerError(f"{what}: rank {dead[0][0]} of {self.world} died (exit code "
                                             f"{dead[0][1]}) without an answer") from None
                if time.monotonic() > deadline:
                    missing = sorted(set(range(self.world)) - set(got))
                    self.close(force=True)
                    raise ShardedWorkerError(f"{what}: rank(s) {missing} of {self.world} gave no answer within "
                                             f"{timeout:.0f} s (a hung collective?); the pool was stopped") from None
                continue
            if not ok:                                     # this task's, or a warm-up's: the pool is unusable
                self.close(force=True)
                raise ShardedWorkerError(f"{what}: rank {rank} of {self.world} raised:\n{payload}")
            if s == seq:
                got[rank] = payload                        # else a warm-up's answer: nothing to keep
        return [got[r] for r in range(self.world)]

    def close(self, force: bool = False) -> None:
        """Stop the ranks: asked to leave (join a few seconds), else terminated; force: terminated at once
        (a rank blocked in a collective never reads its queue)."""
        if self.closed:
            return
        self.closed = True
        if not force:
            for q in self.tasks:
                with contextlib.suppress(Exception):
                    q.put(None)
            for p in self.procs:
                p.join(timeout=10)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        if _POOLS.get((self.world, self.device_type)) is self:
            del _POOLS[(self.world, self.device_type)]


_POOLS: dict = {}


def pool(world: int, device_type: str = "cpu") -> Pool:
    """The running pool of `world` ranks on `device_type`, started on first use (and after a failure)."""
    p = _POOLS.get((world, device_type))
    if p is None or p.closed:
        p = _POOLS[(world, device_type)] = Pool(world, device_type)
    return p


def shutdown() -> None:
    """Stop every pool (at exit, or to free the processes)."""
    for p in list(_POOLS.values()):
        p.close()


atexit.register(shutdown)


# ---------------------------------------------------------------------------- a rank


def _poisoned(on: bool):
    """Uninitialised torch memory NaN-filled while a task runs (the candidate's side of a check), else nothing."""
    from invariants.target import poisoned_memory
    return poisoned_memory() if on else contextlib.nullcontext()


def _serve(rank: int, world: int, port: int, device_type: str, tasks, results) -> None:
    """A rank's loop: join the group, answer ("ready"), then one answer per task until None."""
    import torch.distributed as dist
    try:
        if device_type == "cpu":
            from impl.interpreter import quiet_discarded_lanes
            quiet_discarded_lanes()
            # `world` ranks share the host's cores: one intra-op thread each, or they oversubscribe them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        if device_type == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world, timeout=datetime.timedelta(seconds=COLLECTIVE_SECONDS))
        device = torch.device(f"cuda:{rank}" if device_type == "cuda" else "cpu")
    except BaseException:
        results.put((0, rank, False, traceback.format_exc()))
        return
    results.put((0, rank, True, None))
    models: dict = {}
    while True:
        item = tasks.get()
        if item is None:
            break
        seq, task = item
        try:
            results.put((seq, rank, True, _run(task, rank, world, device, models)))
        except BaseException:
            results.put((seq, rank, False, traceback.format_exc()))
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def _model(key: tuple, rank: int, world: int, device, models: dict):
    """(Weights shard, decoder, KDA heads) of (checkpoint, implementation name, dtype), loaded once."""
    if key not in models:
        from impl import registry
        from impl.sharded import ShardedDecoder, plan_of, shard_weights
        from impl.weights import to_torch
        from oracle.checkpoint import load as load_weights
        ckpt, backend, dtype = key
        dtype = getattr(torch, dtype)
        impl_ = registry.get(backend)
        plan = plan_of(impl_)
        # an NVFP4 checkpoint's expert codes kept: the decoder runs them where the implementation takes them
        weights = to_torch(load_weights(ckpt), device, dtype, nvfp4=True)
        models[key] = (shard_weights(weights, rank, world, plan), ShardedDecoder(impl_, device, dtype, plan),
                       weights.geometry.linear_num_heads)
    return models[key]


def _run(task: dict, rank: int, world: int, device, models: dict) -> dict:
    from impl.sharded import gather_state, shard_state
    from impl.state import HybridState
    if task["op"] not in ("load", "forward", "forward_packed", "layer"):
        raise ValueError(f"task: unknown op {task['op']!r}")
    shard, dec, H = _model((task["checkpoint"], task["backend"], task["dtype"]), rank, world, device, models)
    if task["op"] == "load":
        return None
    if task["op"] == "layer":
        return _layer(task, shard, dec, H, rank, world, device)
    if task["op"] == "forward_packed":
        return _packed(task, shard, dec, H, rank, world, device)
    state = None if task["state"] is None else HybridState.deserialize(task["state"], device=device)
    mask = None if task["mask"] is None else torch.as_tensor(task["mask"], device=device)
    dec.log = []
    with torch.no_grad(), _poisoned(task.get("poison", False)):
        logits, new = dec.forward(shard, torch.as_tensor(task["ids"], device=device),
                                  shard_state(state, rank, world, dec.plan), mask)
        full = gather_state(new, rank, world, H, dec.plan)
    return {"logits": logits.float().cpu().numpy(), "state": full.serialize(), "log": dec.log}


def _packed(task: dict, shard, dec, H: int, rank: int, world: int, device) -> dict:
    """A packed step (SERVING.md P4: documents flat, cu_seqlens, one state per document) on the rank's
    shard: the logits [T, V] and each document's new state gathered to the whole model's layout."""
    from impl.sharded import gather_state, shard_state
    from impl.state import HybridState
    states = [None if b is None else shard_state(HybridState.deserialize(b, device=device), rank, world, dec.plan)
              for b in task["states"]]
    dec.log = []
    with torch.no_grad(), _poisoned(task.get("poison", False)):
        logits, new = dec.forward_packed(shard, torch.as_tensor(task["ids"], device=device),
                                         torch.as_tensor(task["cu_seqlens"], device=device), states)
        full = [gather_state(s, rank, world, H, dec.plan).serialize() for s in new]
    return {"logits": logits.float().cpu().numpy(), "states": full, "log": dec.log}


def _layer(task: dict, shard, dec, H: int, rank: int, world: int, device) -> dict:
    """One decoder layer (SPEC §5) of the rank's shard from an empty cache: streams X [B, S, N, D] in,
    the streams out and the layer's cache gathered (a one-layer HybridState)."""
    from impl.sharded import gather_state
    from impl.state import HybridState
    j = task["layer"]
    g = shard.geometry
    X = torch.as_tensor(task["X"], device=device, dtype=dec.dtype)
    mask = torch.ones(X.shape[:2], dtype=torch.bool, device=device) if task["mask"] is None else \
        torch.as_tensor(task["mask"], device=device).bool()
    dec.log = []
    with torch.no_grad(), _poisoned(task.get("poison", False)):
        X, cache, _ = dec.decoder_layer(shard.layers[j], g, X, mask, None, None)
        full = gather_state(HybridState((g.layer_types[j],), [cache], int(X.shape[1])), rank, world, H, dec.plan)
    return {"X": X.float().cpu().numpy(), "state": full.serialize(), "log": dec.log}


# ---------------------------------------------------------------------------- the public face


class ShardedModel:
    """The whole decoder served over `world` ranks (impl/sharded.py): forward like impl.model.Model's.

    backend: the registry name of the implementation every rank composes ("triton", "torch",
    "mutant:<name>", "pkg.mod:obj": each rank resolves it, so it must be importable there)."""

    def __init__(self, checkpoint_dir, world: int, device="cpu", dtype: Optional[torch.dtype] = None,
                 backend: str = "triton", timeout: float = CALL_SECONDS, poison: bool = False):
        from impl.sharded import check_world
        from oracle.config import Geometry
        self.checkpoint = str(pathlib.Path(checkpoint_dir).resolve())
        self.geometry = Geometry.from_pretrained(self.checkpoint)
        check_world(self.geometry, world)
        self.device = torch.device(device)
        check_devices(world, self.device.type)
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.world, self.backend, self.timeout, self.poison = world, backend, timeout, poison
        self.ranks: Optional[list] = None      # every rank's last answer: logits, state bytes, decision log
        # the ranks load (and shard) the checkpoint now, while the caller does other work
        pool(world, self.device.type).submit({"op": "load", **self._model()})

    def _model(self) -> dict:
        return {"checkpoint": self.checkpoint, "backend": self.backend, "dtype": str(self.dtype).replace("torch.", "")}

    def forward(self, input_ids, attention_mask=None, state=None):
        """SPEC §3 over the ranks: (logits float32 [B, S, V], whole-model impl HybridState) from rank 0;
        the given state is not mutated."""
        from impl.state import HybridState

        def host(a):
            return None if a is None else (a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a))
        task = {"op": "forward", **self._model(), "ids": host(input_ids), "mask": host(attention_mask),
                "state": None if state is None else state.serialize(), "poison": self.poison}
        self.ranks = pool(self.world, self.device.type).call(task, self.timeout)
        first = self.ranks[0]
        return (torch.as_tensor(first["logits"], device=self.device),
                HybridState.deserialize(first["state"], device=self.device))

    __call__ = forward

    def forward_packed(self, input_ids, cu_seqlens, states):
        """SERVING.md P4 over the ranks: (logits float32 [T, V], one whole-model impl HybridState per
        document) from rank 0; no state given is mutated."""
        from impl.state import HybridState

        def host(a):
            return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        task = {"op": "forward_packed", **self._model(), "ids": host(input_ids), "cu_seqlens": host(cu_seqlens),
                "states": [None if s is None else s.serialize() for s in states], "poison": self.poison}
        self.ranks = pool(self.world, self.device.type).call(task, self.timeout)
        first = self.ranks[0]
        return (torch.as_tensor(first["logits"], device=self.device),
                [HybridState.deserialize(b, device=self.device) for b in first["states"]])

    def layer(self, index: int, X, mask=None):
        """Decoder layer `index` alone over the ranks (SPEC §5), from an empty cache: (streams X
        [B, S, N, D] float32, its cache as a one-layer HybridState) from rank 0."""
        from impl.state import HybridState
        task = {"op": "layer", **self._model(), "layer": int(index),
                "X": X.detach().cpu().numpy() if isinstance(X, torch.Tensor) else np.asarray(X),
                "mask": None if mask is None else np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask),
                "poison": self.poison}
        self.ranks = pool(self.world, self.device.type).call(task, self.timeout)
        first = self.ranks[0]
        return (torch.as_tensor(first["X"], device=self.device),
                HybridState.deserialize(first["state"], device=self.device))


def load(checkpoint_dir, world: int, device="cpu", dtype: Optional[torch.dtype] = None,
         backend: str = "triton", timeout: float = CALL_SECONDS) -> ShardedModel:
    """A checkpoint served over `world` ranks (ShardingError when its geometry does not divide)."""
    return ShardedModel(checkpoint_dir, world, device, dtype, backend, timeout)

