"""Root of the test tree. Its presence puts tests/ on sys.path (pytest's default "prepend"
import mode), so test modules in any sub-folder import the shared helpers (simhelpers,
exporter_factories) however pytest was started."""
