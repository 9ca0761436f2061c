"""BBQ tasks: frozen instrument, nested subsets, memberships and the full set."""

#: The BBQ task version of every BBQ task, packaged or registered (docs/tasks.md): 2.0 fixed
#: the bias rule, 2.1 alternates the few-shot pool's context conditions.
TASK_VERSION = "2.1"
