"""The attacks bench/attack.py makes, by kind: the server under attack and its callers
(target), floods of slow bodies and long polls (floods), one hostile request at a time
(hostile), and the operations and smaller findings (operations)."""
