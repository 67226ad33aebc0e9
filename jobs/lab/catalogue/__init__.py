"""The catalogue: which experiments exist, their parameters and the rules between them.

    registry.py   resolves and checks a run's parameters (the form, the API and the
                  launcher all ask it); its data is schemas.py (one strategy at a time)
                  and combined.py (strategies combined)

Plain data and arithmetic, no torch (a contract): the web server imports it.
"""
