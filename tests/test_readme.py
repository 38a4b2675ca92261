"""The README's ```python snippets run as written (in order, sharing one namespace).

Blocks fenced as ```py are illustrations (templates with ``...``) and are not run.
"""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_snippets_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "README has no python snippets"
    ns: dict = {}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"README.md block {i}", "exec"), ns)
        except Exception as exc:  # name the block in the failure
            raise AssertionError(f"README python block {i} failed: {exc!r}\n{code}") from exc
