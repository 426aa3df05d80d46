"""Building small programs in tests: ``build(fn)`` under fresh programs and names, ``ops_of`` to compare ops."""
import refimpl as paddle

# the attrs every op carries (roles, scopes, devices): left out when ops are compared with Paddle's
COMMON = ("op_callstack", "op_namescope", "op_role", "op_role_var", "op_device", "with_quant_attr")


def build(fn):
    """(main, startup, fn()) with ``fn`` run under new programs and a fresh unique-name guard."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            out = fn()
    return main, startup, out


def ops_of(prog):
    """[(type, inputs, outputs, attrs without COMMON)] of the global block's ops."""
    return [(op.type, {n: op.input(n) for n in op.input_names}, {n: op.output(n) for n in op.output_names},
             {n: op.attr(n) for n in op.attr_names if n not in COMMON}) for op in prog.global_block().ops]
