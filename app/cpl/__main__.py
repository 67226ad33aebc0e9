"""`python -m app.cpl`: the same as the `cpl` console script."""

from app.cpl.main import main

main()
