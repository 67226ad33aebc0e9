"""The lab's models of a run, plain arithmetic, no torch (a contract): what each strategy
should cost, hold and move, so every measurement is printed beside its prediction, and
the web server draws and prices runs without the GPU code.

    cost.py        bytes, FLOPs, bubble and step time       memory.py     memory per rank
    experts.py     a mixture-of-experts GPT's numbers       mesh.py       dp x pp x tp grids
    schedule.py    interleaved and zero-bubble schedules    sequence.py   SP/CP memory
    recompute.py   activation recomputation's memory        zero3.py      ZeRO-3's plan
    placement.py, placement_sequence.py, placement_interleaved.py
                   where each parameter lives under a strategy; layout.py puts them together
                   as the sharding view's data
    whatif.py      the calculator's inputs and checks;      estimate.py   its answer
"""
