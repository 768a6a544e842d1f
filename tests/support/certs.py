"""Test certificates: the product's throwaway certificate authority (sparklog/broker/local_pki.py), made per test
session into a temporary directory (nothing committed).

    pki = make_pki(tmp_dir)   # see local_pki's docstring for what it holds
"""

from sparklog.broker.local_pki import Bundle, Pki, make_pki  # noqa: F401 - the tests' names for it
