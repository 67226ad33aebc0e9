"""What a run looks like: HTML and SVG drawn from what the run recorded. The views read
the run lifecycle (app/journal's other modules); nothing there imports them (a contract).

    cards.py            the ```run embed: a result card (card_training.py, card_experts.py
                        for those runs; lessons.py: what a training run teaches, in
                        sentences, hardware_lessons.py a measurement of the hardware)
    card_markdown.py    the card as markdown (and its chart as an SVG file) for files on disk
    charts.py           SVG charts for cards: bars, stacks, lines, log-log with fits
    rank_events.py      a run's events.jsonl, read once
    timeline.py, timeline_chart.py, ideal_schedule.py
                        one measured step rank by rank, its idle time, the ideal schedule
    trace.py, traffic.py  the Chrome trace export; the rank x rank bytes heat-map
    sharding.py, shard_tiles.py  the sharding view (jobs.lab.predict.layout's data)
"""
