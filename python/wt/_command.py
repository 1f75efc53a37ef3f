"""`wt` on PATH after `pip install`: the console script runs the wt program packed into the
package (wt/bin/wt), with the same arguments, as that program itself."""

import os
import sys


def main():
    from . import _cli
    program = _cli()
    os.execv(program, [program, *sys.argv[1:]])
