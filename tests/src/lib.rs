//! Integration suites live in `tests/`; this library is empty.
