import torch, json
from gate.bench_mla import DN, H, R, W, _mla_weights, _selection
from gate.benchlib import alternating, copy_ceiling, graph
from impl import mla as im
bw = copy_ceiling(); out = {}
for B, vs in ((32, [(None, {}), (4, {}), (4, "c"), (8, "c"), (2, "c")]), (128, [(None, {}), (None, "c"), (2, "c"), (None, "d")])):
    gen = torch.Generator(device="cuda").manual_seed(B * 7 + 32768)
    w = _mla_weights(gen); lat = torch.randn(B, 32768, R, device="cuda", generator=gen, dtype=torch.bfloat16)
    q = torch.randn(B, 1, H, DN, device="cuda", generator=gen, dtype=torch.bfloat16)
    idx = _selection(B, 32768, gen); L = torch.full((B,), 32768, device="cuda", dtype=torch.int64)
    qa = torch.einsum("bshn,hnr->bshr", q, im._split_kv_b(w)[0])
    C = {"c": dict(bh=64, bw=16, num_warps=8, num_stages=3), "d": dict(bh=64, bw=32, num_warps=8, num_stages=2)}
    fns = {}
    for ns, c in vs:
        cfg = C.get(c, {}) if isinstance(c, str) else c
        fns[f"{c or 'ours'}_ns{ns}"] = graph(lambda ns=ns, cfg=cfg: im.sparse_absorbed(qa, lat, idx, L, DN ** -0.5, ns, cfg))
    res = alternating(fns, 5)
    fl = 1e6 * B * W * R * 2 / bw
    for n, r in res.items():
        print(f"B={B} {n:12s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}] {100*fl/r['median_us']:5.1f} % of copy")
    out[B] = res
json.dump(out, open("/tmp/o.json", "w"))
