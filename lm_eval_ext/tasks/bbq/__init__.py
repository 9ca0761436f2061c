"""BBQ tasks: frozen instrument, nested subsets, memberships and the full set."""

#: The BBQ task version of every BBQ task, packaged or registered (README changelog); 2.0
#: fixed the bias rule.
TASK_VERSION = "2.0"
