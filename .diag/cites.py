import ast, pathlib, re
pat = re.compile(r"shared/|SPEC §|SPEC\.md|ARCHITECTURE\.md|SERVING\.md|NVFP4\.md|TESTING\.md|STYLE\.md|SPEC \d|§")
for p in sorted(pathlib.Path(".").rglob("*.py")):
    if ".diag" in p.parts or "tests" in p.parts: continue
    tree = ast.parse(p.read_text())
    docs = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and n.body and isinstance(n.body[0], ast.Expr) and isinstance(getattr(n.body[0], "value", None), ast.Constant):
            docs.add(id(n.body[0].value))
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and pat.search(n.value):
            print(f"{p}:{n.lineno}: {n.value[:110]!r}")
