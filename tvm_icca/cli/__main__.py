"""``python -m tvm_icca.cli``: the ``tvm-icca`` command line."""

import sys

from tvm_icca.cli.main import main

sys.exit(main())
