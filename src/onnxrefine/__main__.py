import sys

from onnxrefine.cli.main import main

sys.exit(main())
