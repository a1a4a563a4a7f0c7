"""Where checkpoint bytes go: the local filesystem or an object store (s3://, gs://, az://).

(Placeholder docstring from issue13a; the Storage protocol and LocalStorage land with issue10engine.)
"""
