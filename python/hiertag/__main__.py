import sys

from hiertag.cli import main

sys.exit(main())
