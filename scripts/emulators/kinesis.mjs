// Starts kinesalite, a Kinesis emulator kept in memory, on 127.0.0.1 and
// the port given (0: a free one), and prints "listening PORT" once it
// accepts connections. Streams are ACTIVE at once. Stops when its
// standard input closes.
import kinesalite from "kinesalite";

const server = kinesalite({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000 });
server.listen(Number(process.argv[2] ?? 0), "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
process.stdin.on("end", () => server.close(() => process.exit(0)));
process.stdin.resume();
