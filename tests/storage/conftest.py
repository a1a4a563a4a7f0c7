"""Object-storage tests use the S3 test server fixtures of tests/conftest.py (s3_server, s3_prefix, s3_env)."""
