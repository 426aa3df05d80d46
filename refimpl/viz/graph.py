"""Program graph: ops and variables of a block as Graphviz dot text (and PNG).

Mirrors the idea of Paddle's ``paddle.base.framework.IrGraph.draw`` and the
``graph_viz_pass`` (``paddle/fluid/framework/ir/graph_viz_pass.cc``), which
write a ``.dot`` file of an IR graph and render it with Graphviz. Differences:
this works on a ``Program`` block directly (no IR graph is built), colours
ops by their ``op_role`` bits (forward, loss, backward, optimize, LR
schedule, dist/RPC) rather than marking only persistables, and renders a PNG
only when the ``dot`` binary is on ``PATH`` (the dot text is always returned).
"""
import shutil
import subprocess

from refimpl.framework.op_role import OpRole

ROLE_COLORS = {  # name: (fill colour, test on the op_role bits)
    "loss": ("#f58518", lambda r: bool(r & OpRole.Loss) and not r & OpRole.Backward),
    "lr_sched": ("#b279a2", lambda r: bool(r & OpRole.LRSched)),
    "dist": ("#e45756", lambda r: bool(r & (OpRole.Dist | OpRole.RPC))),
    "optimize": ("#9d9d9d", lambda r: bool(r & OpRole.Optimize)),
    "backward": ("#54a24b", lambda r: bool(r & OpRole.Backward)),
    "forward": ("#4c78a8", lambda r: True),
}


def role_name(role):
    """The colour class of an ``op_role`` value: forward, loss, backward, optimize, lr_sched, dist."""
    for name, (_, test) in ROLE_COLORS.items():
        if test(int(role)):
            return name
    return "forward"


def _quote(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _var_node(block, name):
    var = block._find_var_recursive(name)
    if var is not None and var.is_parameter:
        return "shape=ellipse, style=filled, fillcolor=\"#fdd0a2\""
    if var is not None and var.persistable:
        return "shape=ellipse, style=filled, fillcolor=\"#e7e7e7\""
    if var is not None and var.is_data:
        return "shape=ellipse, style=filled, fillcolor=\"#c6dbef\""
    return "shape=ellipse"


def _legend():
    rows = "".join(f'<TR><TD BGCOLOR="{c}">{n}</TD></TR>' for n, (c, _) in ROLE_COLORS.items())
    return (f'  legend [shape=plaintext, label=<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0">'
            f'<TR><TD><B>op role</B></TD></TR>{rows}</TABLE>>];')


def program_to_dot(program, block=0, name="program", legend=True):
    """Graphviz dot text of one block: op boxes coloured by role, var ellipses
    (parameters orange, other persistables grey, data blue), edges var -> op
    for inputs and op -> var for outputs."""
    blk = program.block(block)
    lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;",
             "  node [fontname=Helvetica, fontsize=10];"]
    seen = set()
    for i, op in enumerate(blk.ops):
        color = ROLE_COLORS[role_name(op.role())][0]
        lines.append(f"  op_{i} [shape=box, style=\"filled,rounded\", fillcolor=\"{color}\", "
                     f"fontcolor=white, label={_quote(f'{i}: {op.type}')}];")
        for slot_names, incoming in ((op.input_arg_names, True), (op.output_arg_names, False)):
            for v in slot_names:
                if v not in seen:
                    seen.add(v)
                    lines.append(f"  {_quote('var:' + v)} [label={_quote(v)}, {_var_node(blk, v)}];")
                edge = (_quote("var:" + v), f"op_{i}") if incoming else (f"op_{i}", _quote("var:" + v))
                lines.append(f"  {edge[0]} -> {edge[1]};")
    if legend:
        lines.append(_legend())
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_available():
    """Whether the Graphviz ``dot`` binary is on PATH."""
    return shutil.which("dot") is not None


def render_dot(dot_text, path, fmt="png", timeout=60):
    """Render dot text with Graphviz into ``path``; returns ``path``, or None
    when the ``dot`` binary is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    subprocess.run([exe, f"-T{fmt}", "-o", str(path)], input=dot_text.encode(), check=True,
                   timeout=timeout, capture_output=True)
    return path


def program_graph(program, dot_path, png_path=None, block=0):
    """Write the dot file (and the PNG when Graphviz is there); returns (dot text, png path or None)."""
    text = program_to_dot(program, block)
    with open(dot_path, "w") as f:
        f.write(text)
    png = render_dot(text, png_path) if png_path else None
    return text, png
