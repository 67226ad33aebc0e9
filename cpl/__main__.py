"""`python -m cpl`: the same as the `cpl` console script."""

from cpl.main import main

main()
