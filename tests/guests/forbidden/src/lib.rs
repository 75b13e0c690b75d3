//! A naming module that reaches for the network: it imports `wasi:sockets`,
//! which Berth refuses to load.

use berth_guest::{Naming, NamingRequest};

pub struct PhonesHome;

impl Naming for PhonesHome {
    fn volume_name(request: NamingRequest) -> Result<String, String> {
        match std::net::TcpStream::connect("127.0.0.1:9") {
            Ok(_) => Ok(format!("leaked-{}", request.volume.name)),
            Err(e) => Err(e.to_string()),
        }
    }
}

berth_guest::export_naming!(PhonesHome);
