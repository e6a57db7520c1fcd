"""SASL logins: what each mechanism needs to authenticate a connection.

`login.SaslLogin` is the contract a connection uses; `logins.make_login` picks the login for a
cluster's `SaslSettings`. One login per cluster, shared by all of its connections, so that
credentials which are fetched or renewed are prepared once per cluster, not once per connection.
"""
