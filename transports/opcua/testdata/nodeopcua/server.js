// A node-opcua server for the OPC UA transport's secure tests: endpoint
// Basic256Sha256/SignAndEncrypt only, no anonymous access, one user
// (operator/s3cret), client certificates accepted on first sight.
// Usage: node server.js PORT PKI_DIR. Prints "READY <ns> <url>" when up.
const { OPCUAServer, Variant, DataType, SecurityPolicy, MessageSecurityMode, OPCUACertificateManager, StatusCodes } = require("node-opcua");

(async () => {
  const port = parseInt(process.argv[2], 10);
  const pkiDir = process.argv[3];
  const serverCertificateManager = new OPCUACertificateManager({ automaticallyAcceptUnknownCertificate: true, rootFolder: pkiDir });
  const server = new OPCUAServer({
    port,
    hostname: "127.0.0.1",
    serverCertificateManager,
    securityPolicies: [SecurityPolicy.Basic256Sha256],
    securityModes: [MessageSecurityMode.SignAndEncrypt],
    allowAnonymous: false,
    userManager: { isValidUser: (user, password) => user === "operator" && password === "s3cret" },
  });
  await server.initialize();
  const ns = server.engine.addressSpace.getOwnNamespace();
  const plc = ns.addObject({ organizedBy: server.engine.addressSpace.rootFolder.objects, browseName: "plc" });
  let x = 9;
  ns.addVariable({
    componentOf: plc, nodeId: "s=x", browseName: "x", dataType: "Int32", minimumSamplingInterval: 100,
    value: {
      get: () => new Variant({ dataType: DataType.Int32, value: x }),
      set: (v) => { x = v.value; return StatusCodes.Good; },
    },
  });
  await server.start();
  process.on("SIGTERM", async () => { await server.shutdown(0); process.exit(0); });
  console.log("READY " + ns.index + " " + server.getEndpointUrl());
})().catch((e) => { console.error(e); process.exit(1); });
