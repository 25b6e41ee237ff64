"""DSA indexer mutants: each a TorchDSA (impl/baseline/dsa.py) overriding ONE small method, or a TritonDSA
whose index launches our kernels with one planted source edit."""
from __future__ import annotations

import torch

from impl import dsa as idsa
from impl.baseline.dsa import TorchDSA
from impl.mutants.catalogue import kernel_edited, mutant


@mutant("dsa.index", "selection")
class DsaTailOffByOne(TorchDSA):
    """The tail starts one token late: the first token of the current incomplete pool is never attended."""

    def _tail(self, first, val, pos, kpool):
        return super()._tail(first + 1, val, pos, kpool)


@mutant("dsa.index", "selection")
class DsaTailOmitted(TorchDSA):
    """No tail: the current incomplete pool's tokens are not force-included (always_select_tail ignored)."""

    def _tail(self, first, val, pos, kpool):
        return torch.full((val.shape[0], pos.shape[0], 0), -1, dtype=torch.int64, device=val.device)


@mutant("dsa.index", "scores")
class DsaMeanPooling(TorchDSA):
    """Pool keys are the plain mean of the members' keys, not the per-channel softmax(gsc + ape) mix."""

    def _pool_softmax(self, lam):
        real = torch.isfinite(lam).to(lam.dtype)
        return real / real.sum(dim=-2, keepdim=True).clamp(min=1.0)


@mutant("dsa.index", "selection")
class DsaVisibleByFirstToken(TorchDSA):
    """A pool is a candidate once its FIRST member is visible (it should be its last): future tokens leak."""

    def _visible_member(self, member_idx):
        return member_idx[..., 0]


@mutant("dsa.index", "selection")
class DsaTailRepeatsPickedPool(TorchDSA):
    """With pads inside the cache, the tail keeps tokens of a pool the top-k also picked: a position twice in one selection (the sparse attention counts it twice)."""

    def _tail_not_picked(self, tail, picked, kpool):
        return tail


@mutant("dsa.index", "selection")
class DsaBudgetTopk(TorchDSA):
    """The selection has topk slots (2048) instead of topk + P_k - 1 (2051): a full tail is cut off."""

    def _width(self, w):
        return w.topk


@mutant("dsa.index", "selection")
class DsaAnchorAtZero(TorchDSA):
    """Pools are anchored at position 0, not at the first real token: left padding shifts every pool."""

    def _anchor(self, val):
        return torch.zeros(val.shape[0], dtype=torch.int64, device=val.device)


@mutant("dsa.index", "scores")
class DsaNewestPoolStaleKey(TorchDSA):
    """The newest kept pool is scored with the pool key before it (a pooled-key cache one pool behind): only the last positions pick wrongly, the caches stay right."""

    # what a bug near the end of the selection looks like from outside: in an MLA layer only the last
    # positions' attention output is wrong while the latent cache and the index rows agree

    def pool_keys(self, packed, ape, kpool):
        kbar, member_idx, pool_valid, first, kept = super().pool_keys(packed, ape, kpool)
        if kbar.shape[1] >= 2:
            kbar = torch.cat([kbar[:, :-1], kbar[:, -2:-1]], dim=1)
        return kbar, member_idx, pool_valid, first, kept


@mutant("dsa.index_paged", "selection")
class DsaPagedPagePastRow(TorchDSA):
    """Pages counted as len // page_size + 1, the last one holding len % page_size or a full page: one page past the row at exact multiples."""

    # each idiom is right beside its own partner (ceil with `% or`, `// + 1` with a plain `%`); together
    # they read a whole stale page of the block table into the pools and the top-k
    def _row_extent(self, length, page_size):
        pages = length // page_size + 1
        return pages, (pages - 1) * page_size + (length % page_size or page_size)


@mutant("dsa.index_paged", "selection")
class DsaPagedWholeLastPage(TorchDSA):
    """The paged indexer reads every slot of a row's last page, not only its first len % page_size: the page's unwritten tail joins the row."""

    def _row_extent(self, length, page_size):
        pages = -(-length // page_size)
        return pages, pages * page_size


@mutant("dsa.batch", "batch")
class DsaAnchorFromBatch(TorchDSA):
    """Every row's pools are anchored at the batch's earliest first real token, a per-row offset taken batch-wide (jundot/omlx #3368)."""

    def _anchor(self, val):
        first = super()._anchor(val)
        return first.min().expand_as(first).clone() if first.numel() else first


@mutant("dsa.rerun", "rerun")
class DsaTopkTiesRaced(TorchDSA):
    """Pools whose scores tie exactly take the top-k slots in a run-dependent order (a top-k whose tied entries race for the slots, jundot/omlx #2243)."""

    def _pick_pools(self, I, cand, member_idx, k_sel):
        # a fresh pool order per call: which of exactly tied pools sorts first changes from run to run
        perm = torch.randperm(I.shape[-1], device=I.device)
        return super()._pick_pools(I[..., perm], cand[..., perm], member_idx[:, perm], k_sel)


class TritonDSA:
    """Our Triton dsa namespace (impl/dsa.py) as a class: the base of mutants that plant one edit in a kernel
    its `index` launches."""

    BATCH_INVARIANT = idsa.BATCH_INVARIANT
    index_rows = staticmethod(idsa.index_rows)
    index = staticmethod(idsa.index)
    index_paged = staticmethod(idsa.index_paged)


@mutant("dsa.index", "scores", base="triton")
class DsaPoolKernelNoApe(TritonDSA):
    """The pooling kernel's softmax logits leave out the member position embedding ape: gsc alone weighs the members."""

    def index(self, w, a, q_lat, packed_all, mask=None):
        with kernel_edited(idsa, "dsa_pool_fwd_kernel", "b_g + b_a[None, :, :]", "b_g"):
            return idsa.index(w, a, q_lat, packed_all, mask)


@mutant("dsa.index", "selection", base="triton")
class DsaPoolKernelIgnoresValidFlag(TritonDSA):
    """The pooling kernel takes every cached token after the anchor as a real member, ignoring its valid flag: a pad inside a pool joins it and the pool counts as complete."""

    def index(self, w, a, q_lat, packed_all, mask=None):
        with kernel_edited(idsa, "dsa_pool_fwd_kernel", "b_ok = b_in & b_val", "b_ok = b_in"):
            return idsa.index(w, a, q_lat, packed_all, mask)


@mutant("dsa.index", "selection", base="triton")
class DsaSelectKernelThreshold16Bits(TritonDSA):
    """The selection kernel's threshold search stops after the top 16 of the 32 key bits: pools whose scores agree in sign, exponent and 7 mantissa bits with the k-th best are all picked, more than k."""

    def index(self, w, a, q_lat, packed_all, mask=None):
        with kernel_edited(idsa, "dsa_select_fwd_kernel", "range(32 // RB)", "range(16 // RB)"):
            return idsa.index(w, a, q_lat, packed_all, mask)


@mutant("dsa.index", "selection", base="triton")
class DsaSelectKernelTailOverPickedPool(TritonDSA):
    """The selection kernel appends the tail even when its pool was picked (a mask hole): those positions twice in one selection."""

    def index(self, w, a, q_lat, packed_all, mask=None):
        with kernel_edited(idsa, "dsa_select_fwd_kernel", "(b_hit == 0)[:, None]", "(b_hit >= 0)[:, None]"):
            return idsa.index(w, a, q_lat, packed_all, mask)


@mutant("dsa.index", "selection", base="triton")
class DsaSelectKernelRanksRestartPerTile(TritonDSA):
    """The selection kernel numbers each tile's picks from 0 (the count of earlier tiles' picks dropped): a later tile's pools overwrite the first ones' slots."""

    def index(self, w, a, q_lat, packed_all, mask=None):
        with kernel_edited(idsa, "dsa_select_fwd_kernel", "b_sel[:, None] + tl.cumsum(b_pick, 1) - b_pick",
                           "tl.cumsum(b_pick, 1) - b_pick"):
            return idsa.index(w, a, q_lat, packed_all, mask)
