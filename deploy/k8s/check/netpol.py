"""netpol.py POLICIES FLOWS evaluates each flow of FLOWS (flows.yaml) against
the NetworkPolicies of the file POLICIES with cyclonus (analyze --mode
query-traffic), applied to namespace flashgate as the kustomization does.
It prints PASS or FAIL for each flow and exits 1 if any intended flow is
refused or any refused flow allowed (2 if the analyzer cannot run)."""
import json, os, re, subprocess, sys, tempfile
import yaml

policies, flows_path = sys.argv[1:3]
cyclonus = os.environ.get("CYCLONUS", "cyclonus")
spec = yaml.safe_load(open(flows_path))
peers, flows = spec["peers"], spec["flows"]

with tempfile.TemporaryDirectory() as tmp:
    pdir = os.path.join(tmp, "policies")
    os.mkdir(pdir)
    n = 0
    for d in yaml.safe_load_all(open(policies)):
        if not d or d.get("kind") != "NetworkPolicy":
            continue
        d.setdefault("metadata", {})["namespace"] = "flashgate"
        n += 1
        with open(os.path.join(pdir, "%02d.yaml" % n), "w") as w:
            yaml.safe_dump(d, w)
    if n == 0:
        print("FAIL %s: no NetworkPolicy" % policies)
        sys.exit(1)

    def peer(name, i):
        p = peers[name]
        labels = {"kubernetes.io/metadata.name": p["namespace"]}
        return {"Internal": {"PodLabels": p["labels"], "NamespaceLabels": labels,
                             "Namespace": p["namespace"]},
                "IP": "10.%d.%d.%d" % (list(peers).index(name) + 1, i // 250, i % 250 + 1)}

    traffic = [{"Source": peer(f["from"], 2 * i), "Destination": peer(f["to"], 2 * i + 1),
                "Protocol": "TCP", "ResolvedPort": f["port"], "ResolvedPortName": ""}
               for i, f in enumerate(flows)]
    tpath = os.path.join(tmp, "traffic.json")
    json.dump(traffic, open(tpath, "w"))
    try:
        out = subprocess.run([cyclonus, "analyze", "--mode", "query-traffic",
                              "--policy-path", pdir, "--traffic-path", tpath],
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("FAIL cyclonus: %s" % e)
        sys.exit(2)
    # Each flow's answer is a table whose footer reads "IS ALLOWED? | TRUE".
    got = re.findall(r"IS ALLOWED\?\s*\|\s*(TRUE|FALSE)", out.stdout)
    if out.returncode != 0 or len(got) != len(flows):
        print("FAIL cyclonus exited %d with %d answers for %d flows:\n%s%s"
              % (out.returncode, len(got), len(flows), out.stdout[-3000:], out.stderr[-3000:]))
        sys.exit(2)
    bad = 0
    for f, g in zip(flows, got):
        allowed = g == "TRUE"
        what = "%s -> %s:%d %s" % (f["from"], f["to"], f["port"], "allowed" if allowed else "refused")
        if allowed == f["allow"]:
            print("PASS netpol %s" % what)
        else:
            bad += 1
            print("FAIL netpol %s, want %s" % (what, "allowed" if f["allow"] else "refused"))
    print("%s: %d flows, %d as intended, %d not" % (os.path.basename(policies), len(flows), len(flows) - bad, bad))
    sys.exit(1 if bad else 0)
