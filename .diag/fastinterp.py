import triton.runtime.interpreter as ti
import triton.language as tl
_real = ti._patch_lang
_restore = ti._LangPatchScope.restore
_done = set()
CALLS = [0, 0]
def _langs(fn):
    return tuple(sorted(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core))
def patch_lang(fn):
    key = _langs(fn)
    CALLS[0] += 1
    if key in _done:
        return ti._LangPatchScope()
    CALLS[1] += 1
    scope = _real(fn)
    _done.add(key)
    return scope
def restore(self):
    _done.clear()
    _restore(self)
ti._patch_lang = patch_lang
ti._LangPatchScope.restore = restore
