"""Connections to a pod's processes that outlive the HTTP request: exec, attach and
port-forward, as kubectl 1.32 speaks them.

``remotecommand``: pods/exec and pods/attach over WebSocket (the ``v5.channel.k8s.io``
family, framed by ``channels``); ``portforward``: pods/portforward over WebSocket or SPDY/3.1
(``spdy``: the framing, header blocks and streams); ``containers``: which container a
request means (shared with pods/log). Below the backend: they read the stored pod only.
"""
