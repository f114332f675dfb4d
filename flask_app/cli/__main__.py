"""`python -m flask_app.cli` runs the `edgerag` command."""

import sys

from flask_app.cli.main import main

sys.exit(main())
