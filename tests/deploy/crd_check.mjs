// Validates custom resources against the @kubernetes-models classes (types, required fields, enums, patterns).
// Usage: node crd_check.mjs NODE_MODULES_DIR < manifests.json   (a JSON array of objects)
// Prints one JSON line per object: {"kind", "name", "ok", "error"}; exits 1 when any object fails or is unknown.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const MODELS = {
  "monitoring.coreos.com/v1/ServiceMonitor": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.js",
  "monitoring.coreos.com/v1/PrometheusRule": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule.js",
  "keda.sh/v1alpha1/ScaledObject": "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject.js",
};

const nodeModules = process.argv[2];
const objects = JSON.parse(readFileSync(0, "utf8"));
let failed = false;
for (const obj of objects) {
  const key = `${obj.apiVersion}/${obj.kind}`;
  const result = { kind: key, name: obj.metadata?.name ?? "", ok: false, error: null };
  const path = MODELS[key];
  if (!path) {
    result.error = "no model for this kind";
  } else {
    const mod = await import(pathToFileURL(join(nodeModules, path)).href);
    try {
      new mod[obj.kind](obj).validate();
      result.ok = true;
    } catch (err) {
      result.error = String(err?.message ?? err);
    }
  }
  failed ||= !result.ok;
  console.log(JSON.stringify(result));
}
process.exit(failed ? 1 : 0);
