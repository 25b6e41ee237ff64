"""A KDA decode gated under CUDA-graph replay (docs/candidates.md section 15): the candidate brings its
decode and, as `decode_graph`, the project's persistent-buffer step (impl.graph.KDADecodeStep) over it.

The step gathers each live row's state from the pool by slot, calls this namespace's `decode`, writes the
state back and copies the output out, all inside the one captured graph: so `decode` must be capturable
(no value read back to the host, nothing decided from a tensor's values). Here `decode` is the project's
fused kernel called out of place; yours takes its place.

    glmgate gate --candidate kda_graph_step:Candidate --check kda.graph_replay
"""
import impl.kda as ours
from impl.graph import KDADecodeStep


class KDA:
    """The kda namespace: `decode`, and the optional `decode_graph` (the rest: the project's Triton)."""

    @staticmethod
    def decode(w, z, f, b, state):
        """impl.kda.decode: one token per row -> (o [B, H, V], the KDAState after it); out of place."""
        return ours.decode(w, z, f, b, state)

    def decode_graph(self, w, pool, max_batch):
        """A decode step captured once at max_batch rows over persistent buffers, replayed with each
        step's inputs and slots copied in; `pool` [P, ...] is copied, never written."""
        return KDADecodeStep(self, w, pool, max_batch)


class Candidate:
    kda = KDA()
