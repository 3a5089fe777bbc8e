"""The tests name the Python lines replicator must report by a comment at the end of the line."""


def line_of(path, marker):
    """The number of the line of `path` that ends with the comment ``# <marker>``."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith("# " + marker):
                return number
    raise LookupError(f"no line of {path} ends with '# {marker}'")
