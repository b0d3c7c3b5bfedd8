INSERT INTO outbox_scale.outbox (topic, key, payload) SELECT 'orders', convert_to('k' || (random()*100000)::int, 'UTF8'), convert_to(repeat('x', 200), 'UTF8') FROM generate_series(1, 10);
