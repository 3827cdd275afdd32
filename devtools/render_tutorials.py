"""Render each tutorial as a page of the manual: its story (the module docstring) and the real output of a run.

``python -m devtools.render_tutorials [--fast] [t01 t04 ...]`` (in ./.venv, from the repository root) runs each
``tutorials/tNN_*.py`` with its default settings in a fresh process (outputs to a temporary folder) and writes
``docs/tutorials/tNN_*.md``: the docstring as Markdown, the command, and everything the run printed, with the date,
machine and time it took. The pages are committed; ``tests/test_docs.py`` checks that each tutorial has its page and
that the page tells the tutorial's current story.
"""
import argparse
import ast
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIALS = os.path.join(ROOT, "tutorials")
PAGES = os.path.join(ROOT, "docs", "tutorials")


def tutorial_names() -> list:
    """The tutorial modules, ``tNN_name`` in number order."""
    return sorted(name[:-3] for name in os.listdir(TUTORIALS) if name[:1] == "t" and name[1:3].isdigit()
                  and name.endswith(".py"))


def story(name: str) -> tuple:
    """(title, body) of tutorial ``name``'s docstring, read without importing it (the body in Markdown)."""
    with open(os.path.join(TUTORIALS, f"{name}.py")) as handle:
        doc = ast.get_docstring(ast.parse(handle.read()))
    title, _, body = doc.partition("\n")
    return title.strip().rstrip("."), body.strip()


def run(name: str, fast: bool) -> tuple:
    """(stdout, seconds) of ``python -m tutorials.<name>`` with its default settings (``--fast`` when asked)."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", f"tutorials.{name}", "--out", out] + (["--fast"] if fast else [])
        env = dict(os.environ, PYTHONPATH=ROOT, MPLBACKEND="Agg", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS",
                                                                                                 "2"))
        start = time.time()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1200)
        seconds = time.time() - start
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout.replace(out, "OUT"), seconds


def page(name: str, output: str, seconds: float, fast: bool) -> str:
    """The Markdown page of tutorial ``name``."""
    title, body = story(name)
    flag = " --fast" if fast else ""
    return (f"# {title}\n\n{body}\n\n## The output of a run\n\n"
            f"`python -m tutorials.{name}{flag}` (source: `tutorials/{name}.py`), run on "
            f"{time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPU cores ({platform.machine()}) in {seconds:.0f} s; "
            f"`OUT` is the `--out` folder:\n\n```text\n{output.rstrip()}\n```\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="tutorials to render (tNN prefixes); default: all")
    parser.add_argument("--fast", action="store_true", help="run each with --fast")
    args = parser.parse_args(argv)
    names = [n for n in tutorial_names() if not args.names or n.split("_")[0] in args.names]
    for name in names:
        output, seconds = run(name, args.fast)
        with open(os.path.join(PAGES, f"{name}.md"), "w") as handle:
            handle.write(page(name, output, seconds, args.fast))
        print(f"{name}: {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
