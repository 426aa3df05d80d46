"""``.. refimpl-modules:: PACKAGE``: one section with ``automodule`` per module of a package.

Autosummary's recursive mode gives every module a page of its own; with
about 130 modules furo's navigation tree (computed for every page) makes the
build slow. This directive documents all modules of one package on one page
instead, found by walking the package (``__main__`` modules are never
imported: importing the launcher's would run it). ``:exclude:`` lists
sub-packages documented on other pages.
"""
import importlib
import pkgutil

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


def module_names(package, exclude=()):
    """``package`` and every module below it, in walk order, minus ``exclude`` prefixes."""
    pkg = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), package + "."):
        name = info.name
        if name.rsplit(".", 1)[-1] == "__main__":
            continue
        if any(name == e or name.startswith(e + ".") for e in exclude):
            continue
        names.append(name)
    return names


class RefimplModules(SphinxDirective):
    required_arguments = 1
    option_spec = {"exclude": directives.unchanged}

    def run(self):
        exclude = (self.options.get("exclude") or "").split()
        lines = []
        for name in module_names(self.arguments[0], exclude):
            lines += [f"``{name}``", "-" * (len(name) + 4), "", f".. automodule:: {name}", ""]
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, self.get_source_info()[0]), node)
        return node.children


def setup(app):
    app.add_directive("refimpl-modules", RefimplModules)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
