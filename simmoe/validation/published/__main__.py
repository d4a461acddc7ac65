import sys
from simmoe.validation.published._old import main
sys.exit(main())
