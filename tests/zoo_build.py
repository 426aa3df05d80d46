"""Build a model-zoo case with refimpl's API and compare it with the program Paddle recorded.

``python tests/zoo_build.py 00_lenet [--ops]`` prints the differences (``diff_programs``) of the
main and startup programs, or, with ``--ops``, the two op-type sequences side by side, so a
mismatch can be found op by op. ``build(name)`` is what ``tests/test_zoo_builds.py`` uses.
"""
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from oracle import diff_programs, load, oracle_file  # noqa: E402


def zoo_module(paddle):
    """``oracle/zoo/zoo.py`` loaded as a module and bound to ``paddle`` (refimpl)."""
    spec = importlib.util.spec_from_file_location("zoo_models", oracle_file(os.path.join("zoo", "zoo.py")))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.bind(paddle, paddle.nn.functional)
    return mod


def case(name):
    return load(oracle_file(os.path.join("zoo", "programs", name + ".json")))


def build(name):
    """(main, startup, loss, recorded dict) of zoo case ``name`` built with refimpl."""
    import refimpl as paddle
    d = case(name)
    zoo = zoo_module(paddle)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            loss, _ = zoo.MODELS[d["case"]](d["config"])
    return main, startup, loss, d


def _side_by_side(got, want):
    n = max(len(got), len(want))
    for i in range(n):
        g = got[i] if i < len(got) else ""
        w = want[i] if i < len(want) else ""
        print(f"{i:4d} {'  ' if g == w else '!!'} {g:40s} {w}")


if __name__ == "__main__":
    name = sys.argv[1]
    main, startup, loss, d = build(name)
    print("loss:", loss.name, "recorded:", d["loss_name"])
    for label, got, want in (("main", main.to_dict(), d["main"]), ("startup", startup.to_dict(), d["startup"])):
        print(f"== {label}")
        if "--ops" in sys.argv:
            _side_by_side([o["type"] for o in got["blocks"][0]["ops"]], [o["type"] for o in want["blocks"][0]["ops"]])
        for line in diff_programs(got, want)[:40]:
            print(line)
