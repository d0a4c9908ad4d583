// Fails when src/generated/openapi.ts is not what openapi-typescript makes from the
// server's OpenAPI document today: the client's types must describe the API the
// services actually serve. It regenerates into a temporary file and compares bytes.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const spec = join(root, "..", "..", "internal", "api", "openapi", "openapi.json");
const committed = join(root, "src", "generated", "openapi.ts");
const dir = mkdtempSync(join(tmpdir(), "pulse-check-types-"));
try {
  const fresh = join(dir, "openapi.ts");
  execFileSync(process.execPath, [join(root, "node_modules", "openapi-typescript", "bin", "cli.js"), spec, "-o", fresh], {
    cwd: root,
    stdio: ["ignore", "ignore", "inherit"],
  });
  let current;
  try {
    current = readFileSync(committed);
  } catch {
    current = Buffer.alloc(0);
  }
  if (!current.equals(readFileSync(fresh))) {
    console.error(
      "src/generated/openapi.ts does not match internal/api/openapi/openapi.json: " +
        "run `npm run gen` in clients/js and commit the result",
    );
    process.exit(1);
  }
  console.log("src/generated/openapi.ts matches internal/api/openapi/openapi.json");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
