INSERT INTO outbox_scale.outbox (topic, key, payload) VALUES ('orders', convert_to('k' || (random()*100000)::int, 'UTF8'), convert_to(repeat('x', 200), 'UTF8'));
