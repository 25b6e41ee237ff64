"""CUDA-graph decode steps: one decode step captured ONCE over persistent buffers and replayed with each
step's inputs and metadata copied into them (the serving engine's side of a captured decode;
docs/candidates.md section 15). Host code only: the kernels are the namespace's own.

Letters: B live rows of a step, M the captured batch (max_batch; rows B..M-1 are padding rows), P state
slots of the pool, T the latent cache's length, W selection width, H heads, K head dim, C conv channels,
R latent rank, N per-head q·k dim, V per-head value dim.

Why: an engine captures one decode step per batch size over PERSISTENT buffers (inputs, per-row state
slots, cache lengths, selections, the state pool) and, before each replay, copies the step's values INTO
those buffers. Anything else is baked into the graph: a buffer rebound to a new tensor instead of written
(the graph keeps reading the tensor it recorded: the stale block-index buffers of vllm #34874), a value
the host computed at capture (a live-row count, a selection width), padding rows left pointing at the slots
of rows that have left. Eager execution has none of these: it hands the kernels this step's tensors. So
`GraphStep` runs one body (`_step`) three ways:

- `eager(*inputs)`: fresh buffers holding this step's values, host sizes taken from this step;
- `capture(*inputs)`: once; the buffers refreshed with these inputs, host sizes taken from them, and the
  body recorded: a torch.cuda.CUDAGraph on CUDA (after a warm-up over padding rows only, which write
  only their own scratch slots), on the CPU the closure over the buffer objects and host sizes of that
  moment (what a graph would have recorded: a value baked in at capture, or a buffer rebound instead of
  written, shows on the CPU too; a host read inside the body fails only a real capture);
- `replay(*inputs)`: each input copied into its persistent buffer (padding rows reset), then the graph
  replayed (the closure run).

Padding rows read and write scratch slots P..P+M-1 that no request owns (an engine's pad slot).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading

import torch

from oracle.types import KDAState


_SIMULATED = threading.local()


def capturing() -> bool:
    """True while the current CUDA stream is being captured into a graph: no value may be read back to
    the host then (validation that reads values is an eager-time check). Also True inside
    `simulated_capture()` (the CPU's stand-in: the code takes its capture path)."""
    if getattr(_SIMULATED, "on", False):
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@contextlib.contextmanager
def simulated_capture():
    """Run the block as if a CUDA graph were being captured (`capturing()` True): without a GPU, the
    capture path of a step (no value read back, value-dependent shapes taken from host-known sizes)
    runs on the CPU, where impl.host_sync.record_host_syncs can show it reads nothing back."""
    old = getattr(_SIMULATED, "on", False)
    _SIMULATED.on = True
    try:
        yield
    finally:
        _SIMULATED.on = old


class GraphStep:
    """One decode step over persistent buffers: eager, capture once, replay (module docstring).

    A subclass names its per-step INPUTS (call order), gives their padding rows (`_padding`), its scratch
    and output buffers (`_scratch`), the host sizes the body is built with (`_sizes`) and the body
    (`_step`, writing buffer "out"); `_check` validates a step's inputs on the host."""

    INPUTS: tuple = ()

    def __init__(self, max_batch: int, device):
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch: expected an int >= 1 (the captured batch), got {max_batch!r}")
        self.max_batch, self.device = max_batch, torch.device(device)
        self._pad = self._padding()
        self.bufs = self._buffers()
        self._captured = None           # the buffer objects the recorded step reads
        self._run = None                # replays the recorded step

    # ------------------------------------------------------------------ the protocol

    def eager(self, *inputs):
        """The step on fresh tensors holding these inputs (no persistent buffer): its outputs."""
        values = self._inputs(inputs)
        bufs = self._buffers()
        self._refresh(bufs, values)
        self._step(bufs, self._sizes(values))
        return self._outputs(bufs, values)

    def capture(self, *inputs):
        """Record the step once, over the persistent buffers holding these inputs; runs nothing on them
        (on CUDA a warm-up runs over padding rows first). Call replay() for every step, this one too."""
        if self._run is not None:
            raise ValueError("capture: this step is already captured (capture once, then replay each step)")
        values = self._inputs(inputs)
        sizes = self._sizes(values)
        if self.device.type == "cuda":
            # compiles and autotunes outside the capture; the buffers hold padding rows only here
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._step(self.bufs, sizes)
            torch.cuda.current_stream().wait_stream(side)
        self._refresh(self.bufs, values)
        self._captured = dict(self.bufs)
        if self.device.type == "cuda":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._step(self._captured, sizes)
            self._run = graph.replay
        else:
            self._run = functools.partial(self._step, self._captured, sizes)

    def replay(self, *inputs):
        """Copy these inputs into the persistent buffers and replay the captured step: its outputs (views
        of the step's output buffer, valid until the next replay)."""
        if self._run is None:
            raise ValueError("replay: the step is not captured yet (call capture(...) once first)")
        values = self._inputs(inputs)
        self._refresh(self.bufs, values)
        self._run()
        return self._outputs(self._captured, values)

    # ------------------------------------------------------------------ buffers

    def _buffers(self) -> dict:
        """Every buffer of the step: the inputs holding padding rows, scratch and outputs (fresh ones each
        call), and the state it keeps across steps (the same tensors every call)."""
        bufs = {n: self._pad[n].clone() for n in self.INPUTS}
        bufs.update(self._scratch())
        bufs.update(self._state())
        return bufs

    def _inputs(self, inputs) -> dict:
        """This step's inputs by name, checked: B live rows, 1 <= B <= max_batch, each [B, ...] of its buffer."""
        if len(inputs) != len(self.INPUTS):
            raise ValueError(f"expected the step's {len(self.INPUTS)} inputs {list(self.INPUTS)}, got {len(inputs)}")
        values = dict(zip(self.INPUTS, inputs))
        B = values[self.INPUTS[0]].shape[0] if values[self.INPUTS[0]].ndim else 0
        if not 1 <= B <= self.max_batch:
            raise ValueError(f"{self.INPUTS[0]}: {B} live rows, expected 1 to max_batch={self.max_batch}")
        for n, v in values.items():
            want = (B, *self._pad[n].shape[1:])
            if not isinstance(v, torch.Tensor) or tuple(v.shape) != want:
                raise ValueError(f"{n}: expected a tensor of shape {want}, got {tuple(getattr(v, 'shape', ()))}")
        self._check(values)
        return values

    def _refresh(self, bufs: dict, values: dict) -> None:
        """Every input written into its buffer, the padding rows after it reset."""
        for n, v in values.items():
            self._put(bufs, n, v)

    def _put(self, bufs: dict, name: str, value) -> None:
        """Write `value` [B, ...] into buffer `name`, rows B.. back to padding: the tensor the recorded
        step reads is written, never replaced."""
        B = value.shape[0]
        bufs[name][:B].copy_(value)
        bufs[name][B:].copy_(self._pad[name][B:])

    def _outputs(self, bufs: dict, values: dict):
        """The live rows of the output buffer."""
        return bufs["out"][:values[self.INPUTS[0]].shape[0]]

    def _pad_slots(self, P: int) -> torch.Tensor:
        """[M] the scratch slot of each padding row: P + row."""
        return P + torch.arange(self.max_batch, device=self.device)

    def _check_slots(self, slots, P: int) -> None:
        """Live rows' slots: integers in [0, P), each at most once."""
        if slots.dtype.is_floating_point or slots.dtype == torch.bool:
            raise ValueError(f"slots: expected an integer tensor, got {slots.dtype}")
        s = slots.tolist()
        if min(s) < 0 or max(s) >= P or len(set(s)) != len(s):
            raise ValueError(f"slots: {s}, expected distinct state slots in [0, {P})")

    # ------------------------------------------------------------------ a mechanism's part

    def _padding(self) -> dict:
        """name -> [M, ...] the value of every row of each input when it is a padding row."""
        raise NotImplementedError

    def _scratch(self) -> dict:
        """name -> the step's scratch and output buffers ("out": [M, ...])."""
        raise NotImplementedError

    def _state(self) -> dict:
        """name -> the tensors the step reads and writes across steps (a pool, a cache): the body reaches
        them through its buffers, so a capture holds the very tensors it recorded."""
        return {}

    def _sizes(self, values: dict) -> dict:
        """The host-side sizes the body is built with; a captured step keeps its capture's, so they may
        depend on the captured shapes only, never on a step's values."""
        return {}

    def _check(self, values: dict) -> None:
        """Refuse metadata no engine would hand over (ValueError naming the input)."""

    def _step(self, bufs: dict, sizes: dict) -> None:
        """The step over buffers `bufs` and host sizes `sizes`: what eager runs and capture records."""
        raise NotImplementedError


class KDADecodeStep(GraphStep):
    """`decode` of namespace `ops` over a pool of P KDA states read and written by slot.

    Inputs of a step (B live rows): z [B, C], f [B, H·K] float32, b [B, H] (kda.decode's), slots [B] int
    (distinct pool rows). Returns o [B, H, V]. `pool` is the KDAState [P, ...] after the steps (the step
    works on its own copy of the pool it was built with)."""

    INPUTS = ("z", "f", "b", "slots")

    def __init__(self, ops, w, pool: KDAState, max_batch: int):
        if not isinstance(pool, KDAState) or pool.recurrent.ndim != 4 or pool.conv.ndim != 3:
            raise ValueError("pool: expected a KDAState(recurrent [P, H, K, V], conv [P, C, W])")
        if pool.recurrent.dtype != torch.float32:
            raise ValueError(f"pool.recurrent: expected dtype torch.float32, got {pool.recurrent.dtype}")
        H, K, W = w.num_heads, w.head_dim, w.conv_width
        self.P = pool.recurrent.shape[0]
        if tuple(pool.recurrent.shape[1:]) != (H, K, K) or tuple(pool.conv.shape) != (self.P, 3 * H * K, W):
            raise ValueError(f"pool: expected recurrent [P, {H}, {K}, {K}] and conv [P, {3 * H * K}, {W}], got "
                             f"{tuple(pool.recurrent.shape)} and {tuple(pool.conv.shape)}")
        self.ops, self.w = ops, w
        self._inplace = "inplace" in inspect.signature(ops.decode).parameters
        # the engine's pool: the P states, then a scratch slot per padding row
        self._rec = torch.cat([pool.recurrent, pool.recurrent.new_zeros(max_batch, H, K, K)])
        self._conv = torch.cat([pool.conv, pool.conv.new_zeros(max_batch, 3 * H * K, W)])
        super().__init__(max_batch, pool.recurrent.device)

    @property
    def pool(self) -> KDAState:
        """The P states after the steps so far."""
        return KDAState(self._rec[:self.P], self._conv[:self.P])

    def _padding(self) -> dict:
        """Zero inputs, each padding row on its own scratch slot."""
        M, H, K = self.max_batch, self.w.num_heads, self.w.head_dim
        dt = self._conv.dtype
        return {"z": torch.zeros(M, 3 * H * K, dtype=dt, device=self.device),
                "f": torch.zeros(M, H * K, dtype=torch.float32, device=self.device),
                "b": torch.zeros(M, H, dtype=dt, device=self.device), "slots": self._pad_slots(self.P)}

    def _scratch(self) -> dict:
        """The gathered states h [M, H, K, V], c [M, C, W] (decode writes them in place) and o [M, H, V]."""
        M, H, K = self.max_batch, self.w.num_heads, self.w.head_dim
        return {"h": torch.empty(M, H, K, K, dtype=torch.float32, device=self.device),
                "c": torch.empty(M, *self._conv.shape[1:], dtype=self._conv.dtype, device=self.device),
                "out": torch.empty(M, H, K, dtype=self._conv.dtype, device=self.device)}

    def _state(self) -> dict:
        """The pool: P states, then a scratch slot per padding row."""
        return {"pool_recurrent": self._rec, "pool_conv": self._conv}

    def _check(self, values: dict) -> None:
        """Distinct slots in the pool."""
        self._check_slots(values["slots"], self.P)

    def _sizes(self, values: dict) -> dict:
        """Rows written back: every one, a padding row into its own scratch slot."""
        return {"rows": self.max_batch}

    def _step(self, bufs: dict, sizes: dict) -> None:
        """Gather the rows' states by slot, one decode, write them back, copy o out."""
        slots, h, c = bufs["slots"], bufs["h"], bufs["c"]
        rec, conv = bufs["pool_recurrent"], bufs["pool_conv"]
        torch.index_select(rec, 0, slots, out=h)
        torch.index_select(conv, 0, slots, out=c)
        kw = {"inplace": True} if self._inplace else {}
        o, new = self.ops.decode(self.w, bufs["z"], bufs["f"], bufs["b"], KDAState(h, c), **kw)
        n = sizes["rows"]
        rec.index_copy_(0, slots[:n], new.recurrent[:n].to(rec.dtype))
        conv.index_copy_(0, slots[:n], new.conv[:n].to(conv.dtype))
        bufs["out"].copy_(o)


class MLAAbsorbedStep(GraphStep):
    """Sparse absorbed MLA decode over a latent cache of P slots: the new token's latent written at its
    row's last position, then `attend(w, q [M, 1, H, N], latent [M, T, R], indices [M, 1, W], lengths [M])
    -> o [M, 1, H, V]` over each row's slot.

    Inputs of a step (B live rows): q [B, H, N], c [B, R] the new token's normalized latent, slots [B] int
    (distinct cache slots), lengths [B] int (each row's cache length with the new token, 1..T), indices
    [B, W] int (positions in [-1, lengths[b]), -1 = none; no position twice). Returns o [B, H, V].
    `latent` is the cache [P, T, R] after the steps."""

    INPUTS = ("q", "c", "slots", "lengths", "indices")

    def __init__(self, attend, w, latent, max_batch: int, width: int):
        if not isinstance(latent, torch.Tensor) or latent.ndim != 3 or latent.shape[2] != w.kv_rank:
            raise ValueError(f"latent: expected the cache [P, T, r_kv={w.kv_rank}], got "
                             f"{tuple(getattr(latent, 'shape', ()))}")
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"width: expected the selection width (an int >= 1), got {width!r}")
        self.attend, self.w, self.width = attend, w, width
        self.P, self.T = latent.shape[:2]
        self._latent = torch.cat([latent, latent.new_zeros(max_batch, *latent.shape[1:])])
        super().__init__(max_batch, latent.device)

    @property
    def latent(self):
        """The P slots' cached latents after the steps so far."""
        return self._latent[:self.P]

    def _padding(self) -> dict:
        """Zero q and c, length 0, an empty selection, each padding row on its own scratch slot."""
        M, w, dev = self.max_batch, self.w, self.device
        dt = self._latent.dtype
        return {"q": torch.zeros(M, w.num_heads, w.nope_dim, dtype=dt, device=dev),
                "c": torch.zeros(M, w.kv_rank, dtype=dt, device=dev), "slots": self._pad_slots(self.P),
                "lengths": torch.zeros(M, dtype=torch.int64, device=dev),
                "indices": torch.full((M, self.width), -1, dtype=torch.int64, device=dev)}

    def _scratch(self) -> dict:
        """The rows' gathered caches [M, T, R] and o [M, H, V]."""
        M, w = self.max_batch, self.w
        return {"rows": torch.empty(M, self.T, w.kv_rank, dtype=self._latent.dtype, device=self.device),
                "out": torch.empty(M, w.num_heads, w.v_dim, dtype=self._latent.dtype, device=self.device)}

    def _state(self) -> dict:
        """The cache: P slots, then a scratch slot per padding row."""
        return {"cache": self._latent}

    def _check(self, values: dict) -> None:
        """Distinct slots, lengths in [1, T], each row's selection a set of its positions."""
        self._check_slots(values["slots"], self.P)
        lengths = values["lengths"].tolist()
        if min(lengths) < 1 or max(lengths) > self.T:
            raise ValueError(f"lengths: {lengths}, expected each row's cache length with its new token, in "
                             f"[1, T={self.T}]")
        idx = values["indices"].to(torch.int64)
        if bool(((idx < -1) | (idx >= values["lengths"].to(idx.device)[:, None])).any()):
            raise ValueError("indices: expected positions in [-1, lengths[b]) of each row")
        srt = idx.sort(-1).values
        if bool(((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any()):
            raise ValueError("indices: a row repeats a position (a selection is a set)")

    def _sizes(self, values: dict) -> dict:
        """Selection columns attended: the whole width (the live rows' widths change from step to step)."""
        return {"width": self.width}

    def _step(self, bufs: dict, sizes: dict) -> None:
        """Write the new latents, gather the rows' caches by slot, attend, copy o out."""
        slots, lengths, cache = bufs["slots"], bufs["lengths"], bufs["cache"]
        # the new token's latent at its row's last position (a padding row: its scratch slot, position 0)
        cache.index_put_((slots, (lengths - 1).clamp(min=0)), bufs["c"])
        torch.index_select(cache, 0, slots, out=bufs["rows"])
        idx = bufs["indices"][:, :sizes["width"]]
        o = self.attend(self.w, bufs["q"][:, None], bufs["rows"], idx[:, None], lengths)
        bufs["out"].copy_(o[:, 0])
