"""The ``tvm-icca`` command line: one module per subcommand (``<name>_command.py``).

:mod:`.main` builds the parser from every ``*_command`` module and turns errors into one line
and an exit status; :mod:`.args` holds the argument types the commands share. Commands use the
drivers (:mod:`tvm_icca.drivers`), the tuner and the workload zoo; they are the top layer.
"""
