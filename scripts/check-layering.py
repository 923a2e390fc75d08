#!/usr/bin/env python3
"""The library layering as lib/CMakeLists.txt states it, checked against the
link graph the CMake files declare (test_layering).

lib/CMakeLists.txt names the layers bottom-up in `set(ST_LAYERS ...)`: a
module folder of lib/ (each of its targets is in that layer), `kernels_cpu`
(kernels/cpu), or a target of its own where a folder's target sits higher
than the folder (`record_step`: one rank's engine step on the recorder, above
the engine). A target may link targets of its own layer or of layers below
it; a link upwards is printed with both layers and fails the check, as does
a lib/ folder with a target that no layer names.

Usage: scripts/check-layering.py [SOURCE_DIR]
"""
import os
import re
import sys


def cmake_calls(text, command):
    """(first argument, the other arguments) of every `command(...)` call."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b" + command + r"\s*\(([^)]*)\)", text):
        words = m.group(1).split()
        if words:
            yield words[0], words[1:]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    top = open(os.path.join(root, "lib", "CMakeLists.txt")).read()
    layers = next((a for n, a in cmake_calls(top, "set") if n == "ST_LAYERS"), None)
    if not layers:
        print("FAIL: lib/CMakeLists.txt has no set(ST_LAYERS ...) naming the layers bottom-up")
        return 1
    rank = {name: i for i, name in enumerate(layers)}
    folders = {"kernels_cpu": os.path.join(root, "kernels", "cpu")}
    for d in sorted(os.listdir(os.path.join(root, "lib"))):
        if os.path.isfile(os.path.join(root, "lib", d, "CMakeLists.txt")):
            folders[d] = os.path.join(root, "lib", d)
    layer_of, links, fails = {}, {}, []
    for module, path in folders.items():
        text = open(os.path.join(path, "CMakeLists.txt")).read()
        for target, _ in cmake_calls(text, "add_library"):
            own = target[3:] if target.startswith("st_") else target
            layer = own if own in rank else module
            if layer not in rank:
                fails.append(f"{target} (lib/{module}): no layer in ST_LAYERS names it")
                continue
            layer_of[target] = layer
        for target, args in cmake_calls(text, "target_link_libraries"):
            links.setdefault(target, []).extend(a for a in args if a.startswith("st_"))
    for target, deps in sorted(links.items()):
        if target not in layer_of:
            continue
        for dep in deps:
            if dep in layer_of and rank[layer_of[dep]] > rank[layer_of[target]]:
                fails.append(f"{target} (layer {layer_of[target]}) links {dep} "
                             f"(layer {layer_of[dep]}, above it)")
    for f in fails:
        print("FAIL:", f)
    print(f"{len(layer_of)} targets in {len(layers)} layers; {len(fails)} problem(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
