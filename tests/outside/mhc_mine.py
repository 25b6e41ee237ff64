"""My mHC: expand, reduce, collapse, write_back (no coefficients: the doc does not give the
layout of fn's output rows nor the roles of MHCWeights.base / scale / rms_eps)."""
import torch


def _check_X(X):
    if X.ndim != 4:
        raise ValueError(f"X: expected [B, S, N, D], got shape {tuple(X.shape)}")
    if not X.is_floating_point():
        raise ValueError(f"X: expected a floating dtype, got {X.dtype}")


class MHC:
    @staticmethod
    def expand(e, N):
        if isinstance(N, bool) or int(N) < 1:
            raise ValueError(f"N: expected >= 1, got {N!r}")
        return e.unsqueeze(2).expand(*e.shape[:2], int(N), e.shape[-1]).contiguous()

    @staticmethod
    def reduce(X):
        _check_X(X)
        return X.float().mean(dim=2).to(X.dtype)

    @staticmethod
    def collapse(pre, X):
        _check_X(X)
        if tuple(pre.shape) != tuple(X.shape[:3]):
            raise ValueError(f"pre: expected {tuple(X.shape[:3])}, got {tuple(pre.shape)}")
        return torch.einsum("bsn,bsnd->bsd", pre.float(), X.float()).to(X.dtype)

    @staticmethod
    def write_back(post, comb, X, y):
        _check_X(X)
        B, S, N, D = X.shape
        for name, a, want in (("post", post, (B, S, N)), ("comb", comb, (B, S, N, N)), ("y", y, (B, S, D))):
            if tuple(a.shape) != want:
                raise ValueError(f"{name}: expected {want}, got {tuple(a.shape)}")
        p = post.to(X.dtype).float()
        c = comb.to(X.dtype).float()
        # output stream n takes column n of comb: X_new[n] = post[n] y + sum_m comb[m, n] X[m]
        mix = torch.einsum("bsmn,bsmd->bsnd", c, X.float())
        return (p[..., None] * y.float()[..., None, :] + mix).to(X.dtype)


class Candidate:
    mhc = MHC


class MHCCombNotTransposed(MHC):
    """bug: stream n takes ROW n of comb."""
    @staticmethod
    def write_back(post, comb, X, y):
        p = post.to(X.dtype).float()
        c = comb.to(X.dtype).float()
        mix = torch.einsum("bsnm,bsmd->bsnd", c, X.float())
        return (p[..., None] * y.float()[..., None, :] + mix).to(X.dtype)


class BugComb:
    mhc = MHCCombNotTransposed


class MHCReduceSum(MHC):
    """bug: reduce sums the streams instead of averaging them."""
    @staticmethod
    def reduce(X):
        return X.float().sum(dim=2).to(X.dtype)


class BugReduceSum:
    mhc = MHCReduceSum
