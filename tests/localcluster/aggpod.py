"""The test image ``rootdisk/aggpod``: an aggregated API server in a pod, as KubeVirt's
virt-api serves ``subresources.kubevirt.io``.

It reads the front-proxy settings from ``kube-system/extension-apiserver-authentication``
with its service-account token, serves ``subresources.example.com/v1`` over TLS on
``$POD_IP:17443`` (certificate and key from the Secret mounted at ``/tls``), trusts the
identity headers only from the front proxy (``apiservice.frontproxy``) and authorizes
each request itself with a SubjectAccessReview, as aggregated API servers must.
``GET .../namespaces/NS/things/NAME/echo`` answers ``{"user", "name"}``.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.request

from aiohttp import web

from apiservice import frontproxy

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
GROUP, VERSION = "subresources.example.com", "v1"


def _api(method: str, path: str, body: object = None) -> dict:
    with open(f"{SA}/token") as fh:
        token = fh.read()  # read each time: the kubelet rotates it
    url = (f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:"
           f"{os.environ['KUBERNETES_SERVICE_PORT']}{path}")
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode()
                                 if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        return dict(json.load(resp))


def main() -> None:
    cm = _api("GET", f"/api/v1/namespaces/{frontproxy.CONFIGMAP_NAMESPACE}/configmaps/"
                     f"{frontproxy.CONFIGMAP_NAME}")
    config = frontproxy.FrontProxyConfig.from_configmap_data(cm["data"])

    async def discovery(request: web.Request) -> web.Response:
        frontproxy.authenticate_aiohttp(request, config)
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1",
                                  "groupVersion": f"{GROUP}/{VERSION}", "resources": [
                                      {"name": "things/echo", "singularName": "",
                                       "namespaced": True, "kind": "Thing",
                                       "verbs": ["get"]}]})

    async def echo(request: web.Request) -> web.Response:
        try:
            who = frontproxy.authenticate_aiohttp(request, config)
        except frontproxy.FrontProxyError as err:
            return web.json_response({"message": str(err)}, status=401)
        ns, name = request.match_info["ns"], request.match_info["name"]
        review = _api("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": who.username, "groups": list(who.groups),
                     "resourceAttributes": {"group": GROUP, "resource": "things",
                                            "subresource": "echo", "verb": "get",
                                            "namespace": ns, "name": name}}})
        if not review["status"].get("allowed"):
            return web.json_response({"message": f"{who.username} may not"}, status=403)
        return web.json_response({"user": who.username, "name": name})

    app = web.Application()
    app.router.add_get(f"/apis/{GROUP}/{VERSION}", discovery)
    app.router.add_get(f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/things/{{name}}/echo", echo)
    ctx = frontproxy.server_ssl_context(config, cert_file="/tls/tls.crt",
                                        key_file="/tls/tls.key")
    print("serving", flush=True)
    web.run_app(app, host=os.environ["POD_IP"], port=17443, ssl_context=ctx, print=None,
                access_log=None)


if __name__ == "__main__":
    main()
