"""The front page and the manual: the README is short and its links resolve, the manual builds with
``mkdocs build --strict`` (a broken link or API reference fails), every page is in the navigation, every tutorial has
its page telling its current story, and the README's LrTrainer example runs."""
import os
import re
import subprocess
import sys
import textwrap

import pytest
import yaml

from devtools.render_tutorials import PAGES, story, tutorial_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as handle:
        return handle.read()


def _nav_pages(nav) -> list:
    """Every page file named in mkdocs.yml's ``nav``, depth first."""
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


class TestReadme:
    def test_front_page_is_short(self):
        """The README is a front page of at most 150 lines, with the two commands and no process notes."""
        text = _readme()
        assert len(text.splitlines()) <= 150, len(text.splitlines())
        assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
        assert not re.search(r"no GPU machine|was lent|this task", text)

    def test_links_resolve(self):
        """Every relative link of the README names a file of the repository."""
        links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", _readme())
        assert links and [link for link in links if not os.path.exists(os.path.join(ROOT, link))] == []

    def test_lrtrainer_example_runs(self):
        """The README's LrTrainer example runs on model-zoo resnet18_v1 and writes the settings and states files."""
        code = re.search(r"## LrTrainer\n\n```python\n(.*?)```", _readme(), re.S).group(1)
        prelude = textwrap.dedent("""
            import os, tempfile
            import mxnet as mx
            os.chdir(tempfile.mkdtemp())
            net = mx.gluon.model_zoo.vision.resnet18_v1(classes=10)
            net.initialize()
            net(mx.nd.zeros((1, 3, 32, 32)))
        """)
        check = "\nassert os.path.getsize('settings.json') > 0 and os.path.getsize('trainer.states') > 0\n"
        done = subprocess.run([sys.executable, "-c", prelude + code + check], capture_output=True, text=True,
                              cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "resnetv10_dense0_weight" in done.stdout  # explain() printed


class TestManual:
    def test_mkdocs_build_strict(self, tmp_path):
        """``mkdocs build --strict`` succeeds: no broken link, no unresolved API reference, no docstring warning."""
        done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                              capture_output=True, text=True, cwd=ROOT, timeout=600,
                              env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
        assert done.returncode == 0, done.stderr[-4000:]
        assert (tmp_path / "api" / "migrate" / "index.html").is_file()

    def test_every_page_in_the_navigation(self):
        """Each Markdown file under docs/ is in mkdocs.yml's nav, and each nav entry exists."""
        with open(os.path.join(ROOT, "mkdocs.yml")) as handle:
            nav = _nav_pages(yaml.safe_load(handle)["nav"])
        files = sorted(os.path.relpath(os.path.join(d, f), DOCS) for d, _, names in os.walk(DOCS) for f in names
                       if f.endswith(".md"))
        assert sorted(nav) == files

    @pytest.mark.parametrize("name", tutorial_names())
    def test_tutorial_page_tells_the_current_story(self, name):
        """The tutorial's page opens with its docstring's title and story, then the output of a run."""
        title, body = story(name)
        with open(os.path.join(PAGES, f"{name}.md")) as handle:
            page = handle.read()
        assert page.startswith(f"# {title}\n\n{body}\n\n## The output of a run\n"), f"re-render: python -m " \
                                                                                   f"devtools.render_tutorials {name[:3]}"
        assert re.search(r"```text\n.+\n```", page, re.S)
