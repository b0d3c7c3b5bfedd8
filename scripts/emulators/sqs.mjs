// Starts local-aws-sqs, an SQS emulator (AWS JSON 1.0 and query
// protocols), on 127.0.0.1 and the port given (0: a free one), and prints
// "listening PORT" once it accepts connections. Stops on SIGTERM or when
// its standard input closes, so that it never outlives the process that
// started it.
import { createSqsServer } from "local-aws-sqs";

const port = Number(process.argv[2] ?? 0);
const server = await createSqsServer({
  port,
  hostname: "127.0.0.1",
  emulateQueueCreationLifecycle: false, // tests create and delete queues of fresh names at once
});
console.log(`listening ${server.address().port}`);
const stop = () => server.close(() => process.exit(0));
process.on("SIGTERM", stop);
process.stdin.on("end", stop);
process.stdin.resume();
