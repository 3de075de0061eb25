"""Every store written once, in portable SQL over ``storage.sql.SqlEngine``; the
engines (``storage.sqlite``, ``storage.postgres``) differ only through their
``storage.dialect.Dialect`` and executor."""
